package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/schedule"
	"github.com/ferry-ml/ferry/internal/spec"
)

func (a *app) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Fire jobs on a cron or recurrence trigger (Azure ML v2 schedule files)"}
	cmd.AddCommand(a.scheduleCreateCmd(), a.scheduleListCmd(), a.scheduleShowCmd(),
		a.scheduleEnableCmd("enable", true), a.scheduleEnableCmd("disable", false), a.scheduleDeleteCmd())
	for _, sub := range cmd.Commands() {
		if sub.Name() != "create" && sub.Name() != "list" {
			sub.ValidArgsFunction = a.firstArg(listScheduleNames)
		}
	}
	return cmd
}

func listScheduleNames(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	scs, err := c.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(scs))
	for _, sc := range scs {
		out = append(out, sc.Name+"\t"+sc.Trigger)
	}
	return out, nil
}

func (a *app) scheduleCreateCmd() *cobra.Command {
	var o createOpts
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a schedule, or update the one of its name; uploads its job's code once, for every firing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) (*apitypes.Schedule, error) {
				return a.createSchedule(cmd.Context(), c, o)
			}, showSchedule)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "schedule YAML file (required)")
	f.StringVar(&o.name, "name", "", "schedule name (default: the file's)")
	f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set trigger.expression='0 3 * * *'")
	f.StringVar(&o.maxSnap, "max-snapshot-size", "", "largest code snapshot to upload, e.g. 2GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// createSchedule parses the schedule file and its trigger, makes the job
// its create_job names (a file, inline, or a job to copy; a command,
// sweep or pipeline job), uploading that job's code and inputs once, and
// stores the schedule.
func (a *app) createSchedule(ctx context.Context, c *client.Client, o createOpts) (*apitypes.Schedule, error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	sets := o.overrides()
	f, _, err := schedule.Parse(data, sets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	req := apitypes.ScheduleRequest{}
	if ref := spec.ScheduleJobRef(f.CreateJob); ref != "" {
		req.CopyJob = ref
		if m, ok := f.CreateJob.(map[string]any); ok {
			req.Overrides = map[string]any{}
			for k, v := range m {
				if k != "job" {
					req.Overrides[k] = v
				}
			}
		}
	} else {
		src, err := scheduleJobFile(o.file, data, sets, f.CreateJob)
		if err != nil {
			return nil, err
		}
		if spec.IsPipelineFile(src.data) {
			pr, err := a.pipelineRequest(ctx, c, src, o.maxSnap)
			if err != nil {
				return nil, err
			}
			req.Pipeline = &pr
		} else {
			jr, err := a.jobRequest(ctx, c, src, o.maxSnap)
			if err != nil {
				return nil, err
			}
			req.Job = &jr
		}
	}
	raw, err := jsonOf(f)
	if err != nil {
		return nil, err
	}
	req.Spec = raw
	return c.CreateSchedule(ctx, req)
}

// scheduleJobFile is the job file a schedule's create_job makes: the file
// it names (relative to the schedule file), with the other fields of a
// create_job mapping laid over it, or the job written inline, whose local
// paths are relative to the schedule file. Problems with its fields are
// placed where the user wrote them.
func scheduleJobFile(file string, data []byte, sets []string, createJob any) (specFile, error) {
	at := pathField{file: specFile{name: file, data: data, sets: sets}, field: "create_job"}
	inSchedule := func(field string) (string, string, int) {
		shown := "create_job." + field
		return file, shown, spec.FieldLine(data, shown)
	}
	var (
		base      map[string]any
		overrides map[string]any
		jobPath   string
	)
	switch c := createJob.(type) {
	case string:
		jobPath = c
	case map[string]any:
		if p, ok := c["job"].(string); ok {
			jobPath = p
			at.field = "create_job.job"
			overrides = map[string]any{}
			for k, v := range c {
				if k != "job" {
					overrides[k] = v
				}
			}
		} else {
			base = c
		}
	}
	out := specFile{name: file, locate: inSchedule}
	if jobPath != "" {
		at.value = jobPath
		p := at.path()
		jd, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return specFile{}, at.notFound()
		}
		if err != nil {
			return specFile{}, at.errorf("%v", err)
		}
		if len(overrides) == 0 {
			return specFile{name: p, data: jd}, nil
		}
		if err := yaml.Unmarshal(jd, &base); err != nil {
			return specFile{}, fmt.Errorf("%s: %w", p, err)
		}
		// Paths are relative to the job file; a field create_job sets is
		// shown in the schedule file, the others in the job file.
		out = specFile{name: p, locate: func(field string) (string, string, int) {
			top, _, _ := strings.Cut(field, ".")
			if _, ok := overrides[top]; ok {
				return inSchedule(field)
			}
			return p, field, spec.FieldLine(jd, field)
		}}
	}
	merged, err := yaml.Marshal(spec.MergeFields(base, overrides))
	if err != nil {
		return specFile{}, at.errorf("%v", err)
	}
	out.data = merged
	return out, nil
}

func (a *app) scheduleListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List schedules with their triggers and next firings",
		Args:  cobra.NoArgs,
		RunE:  listRun(a, (*client.Client).ListSchedules, scheduleTable),
	}
}

func scheduleTable(w *tabwriter.Writer, scs []*apitypes.Schedule) {
	fmt.Fprintln(w, "NAME\tSTATE\tTRIGGER\tNEXT\tLAST JOB")
	for _, sc := range scs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", sc.Name, scheduleState(sc), sc.Trigger, when(sc.NextFire), orDash(sc.LastJob))
	}
}

func (a *app) scheduleShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule: trigger, next firing, last firing and its job",
		Args:  cobra.ExactArgs(1),
		RunE:  nameRun(a, (*client.Client).GetSchedule, showSchedule),
	}
}

func (a *app) scheduleEnableCmd(verb string, enabled bool) *cobra.Command {
	short := "Enable a schedule: it fires from its next occurrence on (what it missed while disabled is not fired)"
	if !enabled {
		short = "Disable a schedule: it fires no more until enabled"
	}
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: nameRun(a, func(c *client.Client, ctx context.Context, name string) (*apitypes.Schedule, error) {
			return c.SetScheduleEnabled(ctx, name, enabled)
		}, showSchedule),
	}
}

func (a *app) scheduleDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule; the jobs it fired stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.DeleteSchedule(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "schedule %s deleted; the jobs it fired stay\n", args[0])
			return nil
		},
	}
}

func scheduleState(sc *apitypes.Schedule) string {
	switch {
	case !sc.Enabled:
		return "disabled"
	case sc.NextFire == nil:
		return "ended"
	}
	return "enabled"
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

func showSchedule(w *tabwriter.Writer, sc *apitypes.Schedule) {
	fmt.Fprintf(w, "name:\t%s\n", sc.Name)
	if sc.DisplayName != "" {
		fmt.Fprintf(w, "display name:\t%s\n", sc.DisplayName)
	}
	if sc.Description != "" {
		fmt.Fprintf(w, "description:\t%s\n", sc.Description)
	}
	fmt.Fprintf(w, "state:\t%s\n", scheduleState(sc))
	fmt.Fprintf(w, "trigger:\t%s\n", sc.Trigger)
	job := orDash(sc.JobType)
	if sc.Compute != "" {
		job += " on " + sc.Compute
	}
	fmt.Fprintf(w, "job:\t%s\n", job)
	fmt.Fprintf(w, "next firing:\t%s\n", when(sc.NextFire))
	if sc.LastFired != nil {
		fmt.Fprintf(w, "last fired:\t%s (job %s)\n", when(sc.LastFired), orDash(sc.LastJob))
	}
	if sc.LastError != "" {
		fmt.Fprintf(w, "last error:\t%s\n", strings.ReplaceAll(sc.LastError, "\n", " "))
	}
	for k, v := range sc.Tags {
		fmt.Fprintf(w, "tag %s:\t%s\n", k, v)
	}
}
