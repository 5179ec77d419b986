package pymodule

// DirName is the name of the directory Path installs the embedded module into, under its dir.
func DirName() string {
	m, err := module("")
	if err != nil {
		return "python-unknown"
	}
	return "python-" + m.version + "-" + m.hash[:16]
}
