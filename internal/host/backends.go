package host

import (
	// The rendezvous backends tpurun links, each registering itself with package rendezvous: the one list.
	_ "tpurun/rendezvous/etcd"
	_ "tpurun/rendezvous/static" // also named where discovery lays a host-described job out as a static world
	_ "tpurun/rendezvous/tcp"
)
