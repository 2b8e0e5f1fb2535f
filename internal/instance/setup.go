package instance

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Setup script timeouts. Azure ML does not document a default for
// timeout_minutes; 30 minutes leaves room for installing packages, and a
// script that needs more than three hours belongs in an environment image.
const (
	DefaultScriptTimeout = 30 * time.Minute
	MaxScriptTimeout     = 180 * time.Minute
)

// SetupScript is a creation_script or startup_script: run Path (a file in
// the workspace's files, relative), or Command (a shell command line), or
// Path with Command as its arguments, as Azure passes script arguments.
type SetupScript struct {
	Path    string
	Command string
	Timeout time.Duration
	// Content is the text of the script at Path. The CLI reads it next to
	// the compute file and sends it (the server does not read files named
	// by a request).
	Content string
}

// SetupScripts are an instance's scripts; nil where none is given.
// Creation runs once, when the instance is made; Startup on every start.
type SetupScripts struct {
	Creation *SetupScript
	Startup  *SetupScript
}

// ParseSetupScripts reads and checks the setup_scripts field of a compute
// instance as spec.Compute keeps it. Problems are a spec.Errors naming each
// field by its path, e.g. "setup_scripts.startup_script.timeout_minutes".
func ParseSetupScripts(m map[string]any) (SetupScripts, error) {
	var es spec.Errors
	add := func(field, format string, args ...any) {
		es = append(es, &spec.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	var out SetupScripts
	for _, k := range sortedKeys(m) {
		f := "setup_scripts." + k
		var dst **SetupScript
		switch k {
		case "creation_script":
			dst = &out.Creation
		case "startup_script":
			dst = &out.Startup
		default:
			add(f, "unknown field; setup_scripts has creation_script and startup_script")
			continue
		}
		if m[k] == nil {
			continue
		}
		sm, ok := m[k].(map[string]any)
		if !ok {
			add(f, "must be a mapping with path (a script in the workspace files) or command, and optionally timeout_minutes")
			continue
		}
		*dst = parseScript(add, f, sm)
	}
	if len(es) > 0 {
		return SetupScripts{}, es
	}
	return out, nil
}

func parseScript(add addFunc, f string, m map[string]any) *SetupScript {
	unknownFields(add, f, m, "path", "command", "timeout_minutes", "content")
	s := &SetupScript{Timeout: DefaultScriptTimeout}
	for _, k := range []string{"path", "command"} {
		if v, ok := m[k]; ok && v != nil {
			if _, isStr := v.(string); !isStr {
				add(f+"."+k, "must be a string")
			}
		}
	}
	s.Path, _ = m["path"].(string)
	s.Command, _ = m["command"].(string)
	s.Content, _ = m["content"].(string)
	switch p := s.Path; {
	case strings.TrimSpace(p) == "" && strings.TrimSpace(s.Command) == "":
		add(f, "give path (a script in the workspace files) or command (a shell command line)")
	case path.IsAbs(p) || strings.HasPrefix(p, "\\"):
		add(f+".path", "%q is absolute; give a path relative to the workspace files, e.g. Users/me/setup.sh", p)
	case p != "" && (path.Clean(p) == ".." || strings.HasPrefix(path.Clean(p), "../")):
		add(f+".path", "%q leaves the workspace files; give a path inside them", p)
	}
	if v, ok := m["timeout_minutes"]; ok && v != nil {
		n, ok := asInt(v)
		if !ok || n < 1 || time.Duration(n)*time.Minute > MaxScriptTimeout {
			add(f+".timeout_minutes", "must be a whole number of minutes from 1 to %d, got %v", int(MaxScriptTimeout/time.Minute), v)
		} else {
			s.Timeout = time.Duration(n) * time.Minute
		}
	}
	return s
}
