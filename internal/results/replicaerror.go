package results

import (
	"fmt"

	"tpurun/internal/failure"
)

// ReplicaError is a world whose workers exited 0 but where replicas reported errors (function mode: the function
// raised); exit 1, as xmp.spawn's parent fails. errors.Is(err, failure.ErrReplicaError) holds.
type ReplicaError struct {
	Replicas []Result // the failed replicas
}

func (e *ReplicaError) Error() string {
	r := e.Replicas[0]
	return fmt.Sprintf("%d replica(s) reported an error; replica %d (rank %d, pid %d) raised %s: %s",
		len(e.Replicas), r.Replica, r.Rank, r.PID, r.Error.Type, r.Error.Message)
}

// Unwrap makes errors.Is(err, failure.ErrReplicaError) true.
func (e *ReplicaError) Unwrap() error { return failure.ErrReplicaError }
