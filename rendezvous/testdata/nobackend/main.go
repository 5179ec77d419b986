// Command nobackend is a program that links no rendezvous backend: it opens a rendezvous on each backend named by
// its arguments and prints, one line each, whether the error matches ErrConfig and the error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"tpurun/rendezvous"
)

func main() {
	for _, name := range os.Args[1:] {
		r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: name, NNodes: 2, NodeRank: -1})
		if err == nil {
			r.Close()
		}
		fmt.Printf("%v %v\n", errors.Is(err, rendezvous.ErrConfig), err)
	}
}
