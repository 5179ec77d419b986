package failure

import (
	"errors"
	"strings"
)

// Setting names what a configuration error is about: a setting of a job ("grace period"), a variable
// ("MASTER_ADDR"), or a flag itself ("--preload"), which a message then names as it is. The settings that have
// a name of their own (a variable, a flag, the key a value came from) are Named; every other one is a constant
// below, so that a command line binds it to its flag by the constant, never by the words.
type Setting string

// The settings of the job (the launcher's Spec and the command line's own).
const (
	Program        Setting = "PROGRAM"
	Function       Setting = "function"
	FunctionArgs   Setting = "function arguments"
	Preload        Setting = "--preload"
	Environment    Setting = "environment" // the workers' arguments and environment, too big to start
	Grace          Setting = "grace period"
	Timeout        Setting = "timeout"
	MaxRestarts    Setting = "max restarts"
	MasterAddr     Setting = "MASTER_ADDR"
	MasterPort     Setting = "MASTER_PORT"
	RunID          Setting = "run id"
	Role           Setting = "role"
	MaxResultBytes Setting = "max result bytes"
	ResultsFile    Setting = "results file"
	LogDir         Setting = "log directory"
	LogFormat      Setting = "log format"
	Stdin          Setting = "stdin"
	StatusAddr     Setting = "status address"
	NNodes         Setting = "nnodes"
	SliceID        Setting = "slice id"
)

// The settings of the host's detection and plan (topology's errors; NodeRank is the launcher's too).
const (
	Device          Setting = "device"
	AcceleratorType Setting = "accelerator type"
	NProcs          Setting = "nprocs"
	NodeRank        Setting = "node rank"
)

// The settings of the rendezvous: "rendezvous " and the rendezvous's own word for the item (Word), which its
// messages use (they say "rendezvous" already). RendezvousEndpoint and RendezvousRunID are the launcher's too;
// RendezvousTimeout and RendezvousHostsOption are the launcher's alone.
const (
	RendezvousBackend     Setting = "rendezvous backend"
	RendezvousEndpoint    Setting = "rendezvous endpoint"
	RendezvousRunID       Setting = "rendezvous run id"
	RendezvousNodes       Setting = "rendezvous node count"
	RendezvousMinNodes    Setting = "rendezvous minimum node count"
	RendezvousNodeRank    Setting = "rendezvous node rank"
	RendezvousOption      Setting = "rendezvous option" // a key=value of the rendezvous's options
	RendezvousToken       Setting = "rendezvous token"
	RendezvousListen      Setting = "rendezvous listen address"
	RendezvousHostName    Setting = "rendezvous host name"
	RendezvousHosts       Setting = "rendezvous host list"
	RendezvousTimeout     Setting = "rendezvous timeout"
	RendezvousHostsOption Setting = "rendezvous option hosts"
)

// rendezvousPrefix begins the name of every rendezvous setting.
const rendezvousPrefix = "rendezvous "

// Named is the setting that is a name of its own: an environment variable ("TPU_NUM_DEVICES", "PET_NNODES"), a
// flag ("--redirects", for a value only that flag's parser checks) or the key a value came from. A message names
// it as it is; a command line binds no other flag to it.
func Named(name string) Setting { return Setting(name) }

// Word is the setting as a message that already says where it belongs names it: a rendezvous setting by the
// rendezvous's own word ("endpoint" for RendezvousEndpoint, in "bad rendezvous configuration: endpoint ..."),
// any other as it is.
func (s Setting) Word() string { return strings.TrimPrefix(string(s), rendezvousPrefix) }

// SettingError is an error about a setting: every configuration error of the module implements it (failure's,
// topology's, the rendezvous's), so that whoever reports it can name the flag that sets the setting.
type SettingError interface {
	error
	Setting() Setting
}

// SettingOf is the setting err is about: that of the first error in its chain that is a SettingError, else of one
// that names its setting in words (SettingName: a public package's error, such as the rendezvous's), "" when none
// does (or when that error names no setting: a rendezvous error that is not about its configuration, say).
func SettingOf(err error) Setting {
	var e SettingError
	if errors.As(err, &e) {
		return e.Setting()
	}
	var n interface {
		error
		SettingName() string
	}
	if errors.As(err, &n) {
		return Named(n.SettingName())
	}
	return ""
}
