package host

import (
	// The rendezvous backends every launcher links, each registering itself with package rendezvous; etcd's
	// (tpurun/rendezvous/etcd) is linked by the programs that import it, such as tpurun-etcd.
	_ "tpurun/rendezvous/static" // also named where discovery lays a host-described job out as a static world
	_ "tpurun/rendezvous/tcp"
)
