package console

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/internal/failure"
	"tpurun/internal/setting"
)

// NewLogger is tpurun's own logger on w: "console" (human) or "json" (machines), debug when verbose.
func NewLogger(format string, verbose bool, w io.Writer) (*zap.Logger, error) {
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
		return nil, &failure.ConfigError{Field: setting.LogFormat, Value: format, Hint: "use console or json"}
	}
	level := zapcore.InfoLevel
	if verbose {
		level = zapcore.DebugLevel
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)).Named("tpurun"), nil
}
