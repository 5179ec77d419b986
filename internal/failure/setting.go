package failure

import (
	"errors"

	"tpurun/internal/setting"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// Setting names what a configuration error is about: a setting of a job ("grace period"), a variable
// ("MASTER_ADDR"), or a flag itself ("--preload"), which a message then names as it is. Every setting a
// ConfigError of the launcher carries is one of the constants below, and so is every setting of the errors of
// topology and the rendezvous that a flag sets (SettingOf names them): a CLI maps each to its flag by the
// constant, never by the words (cmd/tpurun's test holds every constant to a flag, or to a reason it has none).
type Setting string

// The settings the launcher and its packages check (ConfigError.Field).
const (
	SettingProgram               Setting = "PROGRAM"
	SettingFunction              Setting = "function"
	SettingFunctionArgs          Setting = "function arguments"
	SettingPreload               Setting = "--preload"
	SettingEnvironment           Setting = "environment" // the workers' arguments and environment, too big to start
	SettingGrace                 Setting = "grace period"
	SettingTimeout               Setting = "timeout"
	SettingMaxRestarts           Setting = "max restarts"
	SettingMasterAddr            Setting = "MASTER_ADDR"
	SettingMasterPort            Setting = "MASTER_PORT"
	SettingRunID                 Setting = "run id"
	SettingRole                  Setting = "role"
	SettingMaxResultBytes        Setting = "max result bytes"
	SettingResultsFile           Setting = "results file"
	SettingLogDir                Setting = "log directory"
	SettingLogFormat             Setting = "log format"
	SettingStdin                 Setting = "stdin"
	SettingStatusAddr            Setting = "status address"
	SettingNNodes                Setting = "nnodes"
	SettingSliceID               Setting = "slice id"
	SettingNumSlicesEnv          Setting = topology.EnvMegascaleNumSlices
	SettingSliceIDEnv            Setting = topology.EnvMegascaleSliceID
	SettingRendezvousTimeout     Setting = "rendezvous timeout"
	SettingRendezvousHostsOption Setting = "rendezvous option hosts"
)

// The settings of topology's errors that are not variables (topology.ConfigError.Name).
const (
	SettingDevice          Setting = Setting(setting.Device)
	SettingAcceleratorType Setting = Setting(setting.AcceleratorType)
	SettingNProcs          Setting = Setting(setting.NProcs)
	SettingNodeRank        Setting = Setting(setting.NodeRank) // the launcher's too
)

// The settings of the rendezvous's errors (rendezvous.Error.Field: see SettingOf).
const (
	SettingRendezvousBackend  Setting = Setting(setting.RendezvousBackend)
	SettingRendezvousEndpoint Setting = Setting(setting.RendezvousEndpoint) // the launcher's too
	SettingRendezvousRunID    Setting = Setting(setting.RendezvousRunID)    // the launcher's too
	SettingRendezvousNodes    Setting = Setting(setting.RendezvousNodes)
	SettingRendezvousMinNodes Setting = Setting(setting.RendezvousMinNodes)
	SettingRendezvousNodeRank Setting = Setting(setting.RendezvousNodeRank)
	SettingRendezvousOption   Setting = Setting(setting.RendezvousOption)
	SettingRendezvousToken    Setting = Setting(setting.RendezvousToken)
	SettingRendezvousListen   Setting = Setting(setting.RendezvousListen)
	SettingRendezvousHostName Setting = Setting(setting.RendezvousHostName)
	SettingRendezvousHosts    Setting = Setting(setting.RendezvousHosts)
)

// SettingOf names the setting a configuration error is about ("" when err is not one): a *ConfigError's Field, a
// detection error's variable or setting, or the rendezvous error's field.
func SettingOf(err error) Setting {
	var ce *ConfigError
	var te *topology.ConfigError
	var re *rendezvous.Error
	switch {
	case errors.As(err, &ce):
		return ce.Field
	case errors.As(err, &re) && re.Field != "":
		return Setting(re.Field)
	case errors.As(err, &te):
		return Setting(te.Name)
	}
	return ""
}
