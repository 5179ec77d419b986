package pymodule

// DirName is the name of the directory Path installs the embedded module into, under its dir.
func DirName(opts ...Option) string {
	m, err := module(opts)
	if err != nil {
		return "python-unknown"
	}
	return "python-" + m.version + "-" + m.hash[:16]
}
