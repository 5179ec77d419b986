// Package results owns the launcher's side of the result contract: it reads each worker's framed messages,
// enforces exactly one result per replica world-wide, names every violation, and builds the results document.
//
// The launcher calls Collector.Consume once per worker, in its own goroutine, with the read end of the worker's
// result pipe; after every worker exited it calls Finish with how each rank ended and gets the Document (always)
// and the violations (errors.Join of *ContractError, each wrapping one of the Err sentinels), and Document.Decide
// gives the exit code. WriteFile writes the document atomically. Multi-host: each node publishes its Share (its
// workers and their replicas, its results and its violations), node 0 merges them with Add, and the same checks
// apply world-wide: exactly once, missing results on every node, every node's violations in one document.
//
// The frames' wire format and the workers' side of the contract are package worker's; where the document is
// written, and when, is the launcher's.
package results
