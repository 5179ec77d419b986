package pymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sync"

	"tpurun/worker/python"
)

// pythonFile is one file of the embedded module.
type pythonFile struct {
	name string // base name, e.g. "__init__.py"
	data []byte
}

// embeddedModule is the embedded module, read once: its files in name order, its version and its content hash.
var embeddedModule = sync.OnceValues(func() (pythonModuleInfo, error) {
	var m pythonModuleInfo
	entries, err := fs.ReadDir(python.Files, "tpurun") // sorted by name
	if err != nil {
		return m, err
	}
	h := sha256.New()
	var initPy []byte
	for _, e := range entries {
		name := e.Name()
		b, err := python.Files.ReadFile("tpurun/" + name)
		if err != nil {
			return m, err
		}
		m.files = append(m.files, pythonFile{name: name, data: b})
		if name == "__init__.py" {
			initPy = b
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	match := versionLine.FindSubmatch(initPy)
	if match == nil {
		return m, fmt.Errorf("the embedded tpurun/__init__.py has no line __version__ = \"...\"")
	}
	m.version = string(match[1])
	m.hash = hex.EncodeToString(h.Sum(nil))
	return m, nil
})

type pythonModuleInfo struct {
	files   []pythonFile
	version string
	hash    string // hex SHA-256 of every file's name, size and bytes
}

var versionLine = regexp.MustCompile(`(?m)^__version__ = "([0-9A-Za-z.+!-]+)"$`)

// Version is the version of the embedded Python module (tpurun.__version__, the version pip installs).
func Version() string {
	m, err := embeddedModule()
	if err != nil {
		return "unknown"
	}
	return m.version
}

// BinaryFile is the file of an installed copy (tpurun/_binary) that holds the absolute path of the tpurun binary
// that installed it (Path's binary), exactly, without a newline. tpurun.spawn and tpurun.run run that binary when
// neither their tpurun= argument nor $TPURUN names one; a copy without the file (pip's) looks on PATH.
const BinaryFile = "_binary"

// module is the embedded module with binary in its BinaryFile (none when ""): its files and the content hash of
// all of them.
func module(binary string) (pythonModuleInfo, error) {
	m, err := embeddedModule()
	if err != nil || binary == "" {
		return m, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s", m.hash, BinaryFile, len(binary), binary)
	m.files = append(append([]pythonFile(nil), m.files...), pythonFile{name: BinaryFile, data: []byte(binary)})
	m.hash = hex.EncodeToString(h.Sum(nil))
	return m, nil
}
