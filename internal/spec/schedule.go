package spec

import (
	"strings"
)

// ScheduleFile is an Azure ML CLI v2 schedule file, the input of `ferry
// schedule create -f`. Trigger is kept as read (package schedule reads
// it, with the trigger parser that compute instances' schedules use);
// CreateJob is what each firing submits: a string (a job file's path,
// relative to the schedule file, or azureml:JOB to copy a job the
// workspace has) or a mapping (an inline job, or `job:` naming a file
// or azureml:JOB with fields that override the job's).
type ScheduleFile struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	DisplayName string            `yaml:"display_name,omitempty" json:"display_name,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties  map[string]string `yaml:"properties,omitempty" json:"properties,omitempty"`
	// Version is accepted as Azure's files write it; a schedule has one
	// version, the last one created.
	Version   string         `yaml:"version,omitempty" json:"version,omitempty"`
	Trigger   map[string]any `yaml:"trigger,omitempty" json:"trigger,omitempty"`
	CreateJob any            `yaml:"create_job,omitempty" json:"create_job,omitempty"`
}

const scheduleEmptyHint = "a schedule needs a name, a trigger and create_job, e.g. name: nightly, trigger: {type: cron, expression: \"0 2 * * *\"}, create_job: ./job.yml"

// scheduleNameRe is a schedule's name: a job name's characters, and short
// enough that the names of the jobs it fires (NAME-20260716T210000Z)
// are job names too.
var scheduleNameRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$`)

// ParseSchedule reads a schedule file strictly (see ParseJob), with
// `--set path=value` overrides applied first, and checks its fields
// other than the trigger's contents and the job's.
func ParseSchedule(data []byte, sets []string) (*ScheduleFile, error) {
	f, root, err := parseYAML[ScheduleFile](data, sets, "schedule", scheduleEmptyHint, nil)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return f, nil
}

// DecodeScheduleJSON reads a schedule from strict JSON, the API's form,
// and validates it as ParseSchedule does.
func DecodeScheduleJSON(data []byte) (*ScheduleFile, error) {
	f, root, err := decodeJSON[ScheduleFile](data, "schedule")
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

// Validate checks the file's own fields; every problem is reported, each
// naming its field.
func (f *ScheduleFile) Validate() error {
	var es Errors
	switch {
	case f.Name == "":
		es.add("name", "a schedule needs a name, e.g. name: nightly-train")
	case !scheduleNameRe().MatchString(f.Name):
		es.add("name", "%s is not a valid schedule name: use up to 100 letters, digits, '-' and '_', starting with a letter or digit", quote(f.Name))
	}
	if f.Trigger == nil {
		es.add("trigger", "a schedule needs a trigger: {type: cron, expression: \"0 * * * *\"} or {type: recurrence, frequency: day, interval: 1, schedule: {hours: [2], minutes: [0]}}")
	}
	switch c := f.CreateJob.(type) {
	case nil:
		es.add("create_job", "a schedule needs create_job: a job file (./job.yml), azureml:JOB_NAME to copy a job, or the job inline")
	case string:
		if strings.TrimSpace(c) == "" {
			es.add("create_job", "is empty: write a job file (./job.yml), azureml:JOB_NAME, or the job inline")
		}
	case map[string]any:
		if j, ok := c["job"]; ok {
			if s, isStr := j.(string); !isStr || strings.TrimSpace(s) == "" {
				es.add("create_job.job", "must name a job file (./job.yml) or azureml:JOB_NAME; the other fields of create_job override the job's")
			}
		}
	default:
		es.add("create_job", "must be a job file (./job.yml), azureml:JOB_NAME, or the job inline as a mapping")
	}
	for k := range f.Tags {
		if k == "" {
			es.add("tags", "a tag needs a name")
		}
	}
	return es.err()
}

// ScheduleJobRef is the job a create_job names to copy (azureml:JOB), ""
// when it names a file or is inline.
func ScheduleJobRef(createJob any) string {
	s, ok := createJob.(string)
	if m, isMap := createJob.(map[string]any); isMap {
		s, ok = m["job"].(string)
	}
	if !ok || !strings.HasPrefix(s, "azureml:") || strings.HasPrefix(s, "azureml://") {
		return ""
	}
	return strings.TrimPrefix(s, "azureml:")
}

// MergeFields returns base with over's fields laid over it, mapping into
// mapping (create_job's fields over the job they name). Neither is changed.
func MergeFields(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = MergeFields(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}
