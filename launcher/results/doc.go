// Package results owns the launcher's side of the result contract: it reads each worker's framed messages,
// enforces exactly one result per replica world-wide, names every violation, and builds the results document.
package results
