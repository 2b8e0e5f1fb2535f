package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ferry-ml/ferry/internal/spec"
)

// specFile is a spec file the user named, for the messages about the local
// paths its fields name.
type specFile struct {
	name string   // as the user wrote it: job.yml, ../jobs/train.yml
	data []byte   // its text, where fields' lines are looked up
	sets []string // --set overrides, which the text does not show
	// locate, when not nil, says where the user sees a field of data,
	// which was made from other files (a schedule's create_job): the
	// file, the field's path there and its line (0 when unknown).
	locate func(field string) (file, shown string, line int)
}

// pathField is a local path that a field of a spec file names.
type pathField struct {
	file  specFile
	field string // code, inputs.data.path, environment.conda_file
	value string // the path as written
}

// path is where the path is: relative paths are relative to the folder of
// the file.
func (f pathField) path() string { return resolve(filepath.Dir(f.file.name), f.value) }

// errorf is a problem with the path, placed at the field's line of the
// file (job.yml:3: code: ...) or at the --set that gave it.
func (f pathField) errorf(format string, args ...any) error {
	if f.file.locate != nil {
		file, shown, line := f.file.locate(f.field)
		msg := shown + ": " + fmt.Sprintf(format, args...)
		if line > 0 {
			return fmt.Errorf("%s:%d: %s", file, line, msg)
		}
		return fmt.Errorf("%s: %s", file, msg)
	}
	msg := f.field + ": " + fmt.Sprintf(format, args...)
	for _, s := range f.file.sets {
		p, _, _ := strings.Cut(s, "=")
		if p = strings.TrimSpace(p); p == f.field || strings.HasPrefix(f.field, p+".") {
			return fmt.Errorf("%s: %s (from --set %s)", f.file.name, msg, s)
		}
	}
	if line := spec.FieldLine(f.file.data, f.field); line > 0 {
		return fmt.Errorf("%s:%d: %s", f.file.name, line, msg)
	}
	return fmt.Errorf("%s: %s", f.file.name, msg)
}

// notFound is the error for a path that does not exist, saying what a
// relative path was taken relative to.
func (f pathField) notFound() error {
	v := strings.TrimPrefix(f.value, "file:")
	if filepath.IsAbs(v) {
		return f.errorf("%s does not exist", f.value)
	}
	dir, err := filepath.Abs(filepath.Dir(f.file.name))
	if err != nil {
		dir = filepath.Dir(f.file.name)
	}
	return f.errorf("%s does not exist (relative to %s, the folder of %s)", f.value, dir, filepath.Base(f.file.name))
}

// parseError is the error of parsing the file: its problems placed where
// the user sees their fields.
func (s specFile) parseError(err error) error {
	var es spec.Errors
	if s.locate == nil || !errors.As(err, &es) {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	lines := make([]error, 0, len(es))
	for _, e := range es {
		if e.Field == "" {
			lines = append(lines, fmt.Errorf("%s: %s", s.name, e.Message))
			continue
		}
		lines = append(lines, pathField{file: s, field: e.Field}.errorf("%s", e.Message))
	}
	return errors.Join(lines...)
}
