package rendezvous

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
)

// GatherAll publishes data under key and returns every node's, in node-rank order: Publish and Gather for
// messages larger than a backend takes in one (the tcp server's 4 MiB frame, etcd's 1.5 MiB request). data travels
// in pieces of at most PieceSize(nodes) bytes, one Publish and Gather round per piece under keys derived from key
// (key, key.1, key.2, ...), so that a round's gather holds one piece of every node; the first piece says how many
// follow, and nodes whose data is shorter publish empty pieces for the rounds they lack. nodes is the world's node
// count (Assignment.NNodes). Every node of the world must call it with the same key. The error is the first
// Publish's or Gather's, or one naming a node whose first piece is malformed or who published nothing.
func GatherAll(ctx context.Context, s Session, key string, data []byte, nodes int) ([][]byte, error) {
	size := PieceSize(nodes)
	pieces := max(1, (len(data)+size-1)/size)
	piece := func(i int) []byte {
		if i*size >= len(data) {
			return nil
		}
		return data[i*size : min(len(data), (i+1)*size)]
	}
	first := append(strconv.AppendInt(nil, int64(pieces), 10), '\n')
	got, err := exchange(ctx, s, key, append(first, piece(0)...))
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(got))
	rounds := 1
	for n := range got {
		head, rest, ok := bytes.Cut(got[n], []byte{'\n'})
		k, perr := strconv.Atoi(string(head))
		if !ok || perr != nil || k < 1 {
			return nil, fmt.Errorf("%s of node %d: not a piece count: %.20q", key, n, head)
		}
		bufs[n] = append(bufs[n], rest...)
		rounds = max(rounds, k)
	}
	for i := 1; i < rounds; i++ {
		more, err := exchange(ctx, s, key+"."+strconv.Itoa(i), piece(i))
		if err != nil {
			return nil, err
		}
		for n := range bufs {
			bufs[n] = append(bufs[n], more[n]...)
		}
	}
	return bufs, nil
}

// PieceSize is how many bytes of a node's data one round of GatherAll carries for a world of nodes: a round's
// gather holds every node's piece (base64 in the tcp rendezvous's JSON frames: 4/3 of it), within 1 MiB in all,
// and 16 KiB to 512 KiB per node.
func PieceSize(nodes int) int {
	return max(16<<10, min(512<<10, (1<<20)/max(1, nodes)))
}

// exchange publishes data under key and gathers every node's, in node-rank order.
func exchange(ctx context.Context, s Session, key string, data []byte) ([][]byte, error) {
	if err := s.Publish(ctx, key, data); err != nil {
		return nil, err
	}
	got, err := s.Gather(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(got))
	for n := range out {
		v, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("%s: node %d published nothing", key, n)
		}
		out[n] = v
	}
	return out, nil
}
