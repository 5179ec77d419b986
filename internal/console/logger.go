package console

import (
	"io"
	"maps"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/internal/failure"
)

// LogWriter is a writer for tpurun's own logger on c: it never waits; past the queue's slack a record is counted
// and dropped (Flush reports how many).
func (c *Console) LogWriter() io.Writer { return logWriterOf{c} }

type logWriterOf struct{ c *Console }

func (l logWriterOf) Write(p []byte) (int, error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil || c.abandoned:
	case c.queued+c.heldBytes >= consoleQueue+logSlack:
		c.dropped++
	case c.owner != nil: // a worker's line is open on the console: the record follows it
		c.held = append(c.held, append([]byte(nil), p...))
		c.heldBytes += len(p)
	default:
		c.push(p)
	}
	return len(p), nil
}

// Level is tpurun's own log level: debug when verbose, warnings and errors when quiet (tpurun --quiet), else info.
func Level(verbose, quiet bool) zapcore.Level {
	switch {
	case verbose:
		return zapcore.DebugLevel
	case quiet:
		return zapcore.WarnLevel
	}
	return zapcore.InfoLevel
}

// NewLogger is tpurun's own logger on w: "console" (human) or "json" (machines), at level.
func NewLogger(format string, level zapcore.Level, w io.Writer) (*zap.Logger, error) {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		ec.EncodeCaller = nil
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, &failure.ConfigError{Field: failure.LogFormat, Value: format, Hint: "use console or json"}
	}
	return zap.New(uniqueKeys{Core: zapcore.NewCore(enc, zapcore.AddSync(w), level)}).Named("tpurun"), nil
}

// uniqueKeys is a core whose records have each key once: a field whose key the logger's context (With) or an
// earlier field of the record already has is dropped, the first one kept. The layers log with the loggers they are
// given and add what they know (the rendezvous's run id to a job's logger that has it already); a JSON record with
// a key twice is one that decoders read differently (the last wins in most, an error in some). Fields after a
// namespace are the namespace's own.
type uniqueKeys struct {
	zapcore.Core
	keys map[string]bool // the context's keys
}

func (c uniqueKeys) With(fields []zapcore.Field) zapcore.Core {
	kept, keys := c.unique(fields)
	return uniqueKeys{Core: c.Core.With(kept), keys: keys}
}

func (c uniqueKeys) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c uniqueKeys) Write(e zapcore.Entry, fields []zapcore.Field) error {
	kept, _ := c.unique(fields)
	return c.Core.Write(e, kept)
}

// unique is fields without those whose key came before (in the context or in fields), and the keys so far.
func (c uniqueKeys) unique(fields []zapcore.Field) ([]zapcore.Field, map[string]bool) {
	keys := maps.Clone(c.keys)
	if keys == nil {
		keys = map[string]bool{}
	}
	kept := make([]zapcore.Field, 0, len(fields))
	for i, f := range fields {
		if f.Type == zapcore.NamespaceType { // what follows is nested under f.Key
			keys[f.Key] = true
			return append(kept, fields[i:]...), keys
		}
		if keys[f.Key] && f.Type != zapcore.SkipType {
			continue
		}
		keys[f.Key] = true
		kept = append(kept, f)
	}
	return kept, keys
}
