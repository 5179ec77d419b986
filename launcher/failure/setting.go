package failure

import (
	"errors"

	"tpurun/launcher/topology"
	"tpurun/rendezvous"
)

// SettingOf names the setting a configuration error is about ("" when err is not one): a *ConfigError's Field, a
// detection error's variable, or "rendezvous " and the rendezvous error's field. The CLI maps it to its flag.
func SettingOf(err error) string {
	var ce *ConfigError
	var te *topology.ConfigError
	var re *rendezvous.Error
	switch {
	case errors.As(err, &ce):
		return ce.Field
	case errors.As(err, &re) && re.Field != "":
		return "rendezvous " + re.Field
	case errors.As(err, &te):
		return te.Name
	}
	return ""
}
