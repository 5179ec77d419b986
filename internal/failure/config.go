package failure

import "fmt"

// ConfigError names the setting that is wrong, its value and what to do about it; errors.Is(err, ErrConfig) holds
// (exit 2). Its message is `SETTING="VALUE": HINT`. Other layers' configuration errors (topology's, which also say
// where a value came from and the valid choices; the rendezvous's) name their setting the same way (a SettingError)
// and match ErrConfig too.
type ConfigError struct {
	Field Setting // the setting, e.g. Grace or MasterPort ("MASTER_PORT")
	Value string
	Hint  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Hint)
}

// Setting is the setting the error is about (Field).
func (e *ConfigError) Setting() Setting { return e.Field }

// Unwrap makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Unwrap() error { return ErrConfig }
