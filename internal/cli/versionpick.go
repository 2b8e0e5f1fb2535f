package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// versionPicker reads which version of an asset a command names, from its
// arguments and its flags. Each kind names versions in one of the ways
// below; a picker holds its command's flags, so each command has its own.
type versionPicker interface {
	// usage is how the command line names the version, for the
	// command's Use.
	usage() string
	// add gives cmd its Args and its flags.
	add(cmd *cobra.Command)
	pick(args []string) (name, version string, err error)
}

// versionCmd is a command about one version, named as p reads it: run
// gets its name and version. Callers add flags of their own to what it
// returns.
func versionCmd(p versionPicker, use, short string, run func(cmd *cobra.Command, name, version string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, version, err := p.pick(args)
			if err != nil {
				return err
			}
			return run(cmd, name, version)
		},
	}
	p.add(cmd)
	return cmd
}

// versionFlags name a version as `az ml model` and `az ml data` do: the
// name by --name/-n or as the argument, with --version V or --label
// latest; or a reference that carries its version (NAME@latest,
// azureml:NAME:VERSION, NAME:VERSION), which ref reads.
type versionFlags struct {
	what   string // the thing named ("model", "data asset"), for messages
	ref    func(string) (name, version string, err error)
	labels bool // --label is taken too

	name, version, label string
}

// versionFlagsOf is the pick of a kind whose versions are named by
// versionFlags.
func versionFlagsOf(ref func(string) (string, string, error)) func(what string, labels bool) versionPicker {
	return func(what string, labels bool) versionPicker {
		return &versionFlags{what: what, ref: ref, labels: labels}
	}
}

func (v *versionFlags) nameArg() nameArg {
	return nameArg{
		help:  "the " + v.what + "'s name (or give it as the argument)",
		twice: "the " + v.what + " is %s or %s? give its name once",
		none:  "which " + v.what + "? give its name: NAME or --name NAME",
	}
}

func (v *versionFlags) usage() string {
	if v.labels {
		return "NAME (--version V | --label latest)"
	}
	return "NAME --version V"
}

func (v *versionFlags) add(cmd *cobra.Command) {
	cmd.Args = cobra.MaximumNArgs(1)
	v.nameArg().add(cmd, &v.name)
	cmd.Flags().StringVarP(&v.version, "version", "v", "", "the version")
	if v.labels {
		cmd.Flags().StringVarP(&v.label, "label", "l", "", "a label instead of a version: latest (the newest version not archived)")
	}
}

func (v *versionFlags) pick(args []string) (name, version string, err error) {
	arg, err := v.nameArg().pick(args, v.name)
	if err != nil {
		return "", "", err
	}
	if v.version != "" && v.label != "" {
		return "", "", errors.New("give --version or --label, not both")
	}
	if v.label != "" && v.label != "latest" {
		return "", "", fmt.Errorf("--label %s: the only label is latest", v.label)
	}
	if strings.ContainsAny(arg, ":@") {
		if v.version != "" || v.label != "" {
			return "", "", fmt.Errorf("%s names its version already; leave out --version and --label", arg)
		}
		return v.ref(arg)
	}
	switch {
	case v.version != "":
		return arg, v.version, nil
	case v.label != "":
		return arg, "latest", nil
	}
	return "", "", fmt.Errorf("say which version of %s %s: --version V, --label latest, or %s@latest", v.what, arg, arg)
}

// versionFlag names a version as `ferry component show` does: NAME (or
// azureml:NAME:VERSION) with --version V, the latest when none is given.
type versionFlag struct{ version string }

func newVersionFlag(string, bool) versionPicker { return &versionFlag{} }

func (*versionFlag) usage() string { return "NAME" }

func (f *versionFlag) add(cmd *cobra.Command) {
	cmd.Args = cobra.ExactArgs(1)
	cmd.Flags().StringVar(&f.version, "version", "", "version to show (default: latest)")
}

func (f *versionFlag) pick(args []string) (name, version string, err error) {
	name, version = args[0], f.version
	if n, v, ok := strings.Cut(strings.TrimPrefix(name, "azureml:"), ":"); ok && version == "" {
		name, version = n, v
	}
	if version == "" {
		version = "latest"
	}
	return name, version, nil
}

// refArg names a version as `ferry environment show` does: NAME,
// NAME:VERSION or NAME@latest in the one argument (splitEnvRef), the
// latest when none is given.
type refArg struct{}

func newRefArg(string, bool) versionPicker { return refArg{} }

func (refArg) usage() string { return "NAME[:VERSION|@latest]" }

func (refArg) add(cmd *cobra.Command) { cmd.Args = cobra.ExactArgs(1) }

func (refArg) pick(args []string) (name, version string, err error) {
	name, version = splitEnvRef(args[0])
	return name, version, nil
}
