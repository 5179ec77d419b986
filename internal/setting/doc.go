// Package setting is the one vocabulary of what a configuration error is about: a Setting, and a constant for
// each setting the launcher, the host's detection and the rendezvous check. Each package names its own settings
// with these constants (failure.ConfigError.Field, topology.ConfigError.Name, rendezvous.Error.Field), and every
// configuration error says which setting it is about with a Setting method (Error), which Of finds in a chain
// with errors.As. A command line binds each setting to the flag that sets it where it defines the flag, and names
// that flag for an error about it. The package imports nothing of tpurun: every layer may use it.
package setting
