package rendezvous

import "time"

// Liveness, as every backend counts it: a node proves it lives every Heartbeat (a ping on tcp and static, a lease
// renewal on etcd), and it is lost on evidence (its connection closed: the process gone) or after SilentBeats
// heartbeats of silence, torch's keep-alive (keep_alive_max_attempt intervals, 3 by default). A node or a server
// busy forming a world (thousands of joins, a garbage collection, a loaded host) misses a beat or two and is waited
// for; a dead one is still lost within the limit, and every wait is bounded by the rendezvous timeout.

// SilentBeats is how many heartbeats of silence lose a node (torch's default keep_alive_max_attempt).
const SilentBeats = 3

// SilenceLimit is how long a node may be silent before it is lost: SilentBeats heartbeats.
func SilenceLimit(heartbeat time.Duration) time.Duration { return SilentBeats * heartbeat }
