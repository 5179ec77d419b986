package rendezvous_test

import (
	"os"
	"sync"
	"testing"

	"go.uber.org/zap"
)

// benchLog is every benchmark node's logger: RDZV_BENCH_LOG=FILE writes their lines (debug and up) to FILE, to see
// why a row failed (who was lost, who lost the server, when); none without it.
var benchLog = sync.OnceValue(func() *zap.Logger {
	p := os.Getenv("RDZV_BENCH_LOG")
	if p == "" {
		return nil
	}
	c := zap.NewDevelopmentConfig()
	c.OutputPaths = []string{p}
	l, err := c.Build()
	if err != nil {
		return nil
	}
	return l
})

func benchLogger(testing.TB) *zap.Logger { return benchLog() }
