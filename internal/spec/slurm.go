package spec

import (
	"maps"
	"path"
	"slices"
	"strings"
)

// Slurm's own names (partitions, accounts, QOS, reservations) allow more
// than these patterns, but every value here ends up in a job script's
// #SBATCH line, so whitespace, quotes and shell characters are refused;
// the names sites use fit.
var (
	slurmNameRe = lazyRegexp(`^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$`)
	// A feature expression: features joined by & | , with counts (*2),
	// brackets and parentheses, as sbatch --constraint takes it.
	slurmConstraintRe = lazyRegexp(`^[A-Za-z0-9_.:*&|,()\[\]!+-]{1,256}$`)
)

// MaxSlurmNice bounds priority_nice's values: Slurm takes nice values
// within ±(NICE_OFFSET - 3).
const MaxSlurmNice = 2147483645

// validateSlurm checks a slurm compute: the partition jobs go to, the
// names sbatch is given, the time limit, the tier and priority maps, the
// shared work_dir, and the login node when one is given.
func (c *Compute) validateSlurm(es *Errors) {
	switch {
	case c.Partition == "":
		es.add("partition", "is required: the Slurm partition jobs are submitted to (sinfo lists them)")
	case !slurmNameRe().MatchString(c.Partition):
		es.add("partition", "%s is not a partition name (letters, digits, '_', '.', '+', '-'; one partition)", quote(c.Partition))
	}
	for _, f := range []struct{ name, v string }{{"account", c.Account}, {"qos", c.QOS}, {"reservation", c.Reservation}} {
		if f.v != "" && !slurmNameRe().MatchString(f.v) {
			es.add(f.name, "%s is not a Slurm %s name (letters, digits, '_', '.', '+', '-')", quote(f.v), f.name)
		}
	}
	if c.Constraint != "" && !slurmConstraintRe().MatchString(c.Constraint) {
		es.add("constraint", "%s is not a feature expression as sbatch --constraint takes it, e.g. a100&ib or [rack1|rack2]", quote(c.Constraint))
	}
	for _, tier := range slices.Sorted(maps.Keys(c.JobTierQOS)) {
		f := "job_tier_qos." + tier
		if !slices.Contains(jobTiers, tier) {
			es.add(f, "%s is not a job tier; use %s (as queue_settings.job_tier names them)", quote(tier), joinOr(jobTiers))
		}
		if q := c.JobTierQOS[tier]; !slurmNameRe().MatchString(q) {
			es.add(f, "%s is not a QOS name (letters, digits, '_', '.', '+', '-')", quote(q))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(c.PriorityNice)) {
		f := "priority_nice." + p
		if !slices.Contains(priorities, p) {
			es.add(f, "%s is not a priority; use %s (as queue_settings.priority names them)", quote(p), joinOr(priorities))
		}
		if n := c.PriorityNice[p]; n < -MaxSlurmNice || n > MaxSlurmNice {
			es.add(f, "must be a nice value from %d to %d, got %d", -MaxSlurmNice, MaxSlurmNice, n)
		}
	}
	switch w := c.WorkDir; {
	case w == "":
		es.add("work_dir", "is required: a directory that the submitting host and every compute node see at the same path (a shared file system), e.g. /shared/ferry")
	case !path.IsAbs(w) || path.Clean(w) != w || w == "/":
		es.add("work_dir", "%s must be an absolute, clean path below / (no trailing '/', '.' or '..'), e.g. /shared/ferry", quote(w))
	case strings.ContainsAny(w, " \t\n\r\x00'\"\\$`"):
		es.add("work_dir", "must not contain spaces, quotes, '$', '`', '\\' or line breaks: it is written into job scripts and #SBATCH lines")
	}
	if c.Address == "" {
		if c.SSHSettings != nil {
			es.add("address", "is required with ssh_settings: the login node Ferry submits from over SSH (leave both out to submit on the server's own host)")
		}
		if c.HostKey != "" {
			es.add("host_key", "applies only with address (a login node); remove it")
		}
		return
	}
	c.validateSSHLogin(es)
}
