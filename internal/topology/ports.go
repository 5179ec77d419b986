package topology

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PortHolder finds the process listening on TCP port: the socket inode from <procRoot>/net/tcp and tcp6, then the
// pid whose fd links to socket:[inode]. It returns the pid and command, or an error saying why it could not.
func PortHolder(procRoot string, port int) (int, string, error) {
	var inodes []string
	for _, name := range []string{"tcp", "tcp6"} {
		ino, err := listeningInodes(filepath.Join(procRoot, "net", name), port)
		if err != nil {
			continue
		}
		inodes = append(inodes, ino...)
	}
	if len(inodes) == 0 {
		return 0, "", fmt.Errorf("no listening socket on port %d in %s/net/tcp{,6}", port, procRoot)
	}
	want := map[string]bool{}
	for _, ino := range inodes {
		want["socket:["+ino+"]"] = true
	}
	pid := 0
	if err := eachFD(procRoot, func(p int, target string) bool {
		if want[target] {
			pid = p
			return false
		}
		return true
	}); err != nil {
		return 0, "", err
	}
	if pid == 0 {
		return 0, "", fmt.Errorf("socket inode(s) %s on port %d belong to no process visible in %s", strings.Join(inodes, ","), port, procRoot)
	}
	return pid, command(procRoot, pid), nil
}

// listeningInodes parses a /proc/net/tcp table: "sl local_address rem_address st ... inode", hex ports, state 0A =
// LISTEN.
func listeningInodes(path string, port int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if fields[9] != "0" {
			out = append(out, fields[9])
		}
	}
	return out, sc.Err()
}
