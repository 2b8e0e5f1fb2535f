package studio

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// slurmForm is the attach-a-Slurm-cluster form: the fields of a `type:
// slurm` compute file. As in the SSH attach form, the login node's
// password, key and passphrase are read from the request and never
// written back into a page.
type slurmForm struct {
	Name, Description, Partition, WorkDir            string
	Account, QOS, Constraint, Reservation, TimeLimit string
	// JobTierQOS and PriorityNice are "key=value" pairs joined by commas,
	// as typed ("spot=scavenger, premium=high").
	JobTierQOS, PriorityNice string
	// Where is "local" (sbatch on the server's own host) or "ssh" (over
	// SSH on the login node at Address).
	Where                        string
	Address, Port, User, HostKey string
	// Offered is the fingerprint the login node offered when the form
	// came without a host key, for the user to confirm.
	Offered string
	Errors  map[string]string
	Problem string
}

// slurmFields are the form's fields as the API names them in errors
// (spec validation and the target's Check).
var slurmFields = map[string]string{
	"name": "name", "description": "description", "partition": "partition", "work_dir": "work_dir",
	"account": "account", "qos": "qos", "constraint": "constraint", "reservation": "reservation",
	"default_time_limit": "default_time_limit", "job_tier_qos": "job_tier_qos", "priority_nice": "priority_nice",
	"address": "address", "host_key": "host_key",
	"ssh_settings.admin_username": "admin_username", "ssh_settings.ssh_port": "ssh_port",
	"ssh_settings": "secret", "ssh_settings.admin_password": "secret", "ssh_settings.ssh_private_key_file": "secret",
	"ssh_settings.ssh_private_key": "secret", "ssh_settings.ssh_private_key_passphrase": "secret",
}

func (s *Studio) slurmNew(w http.ResponseWriter, r *http.Request, ss *session) error {
	s.render(w, r, ss, "slurmattach", "Attach a Slurm cluster", slurmForm{Where: "local", Port: "22", Errors: map[string]string{}})
	return nil
}

// slurmCreate sends a slurm compute to the API, as `ferry compute attach
// -f slurm.yml` does. The API runs the target's Check before storing it
// (sinfo answers and lists the partition, work_dir is writable), so a
// compute that comes back is ready; a refusal names the field, and the
// form is shown again with the error beside it. Over SSH without a host
// key, the API names the key the login node offers: the page shows it to
// be confirmed, as the SSH attach form does.
func (s *Studio) slurmCreate(w http.ResponseWriter, r *http.Request, ss *session) error {
	p := r.PostForm
	get := func(k string) string { return strings.TrimSpace(p.Get(k)) }
	f := slurmForm{Name: get("name"), Description: get("description"), Partition: get("partition"), WorkDir: get("work_dir"),
		Account: get("account"), QOS: get("qos"), Constraint: get("constraint"), Reservation: get("reservation"),
		TimeLimit: get("default_time_limit"), JobTierQOS: get("job_tier_qos"), PriorityNice: get("priority_nice"),
		Where: get("where"), Address: get("address"), Port: get("ssh_port"), User: get("admin_username"), HostKey: get("host_key"),
		Errors: map[string]string{}}
	c := &spec.Compute{Name: f.Name, Type: "slurm", Description: f.Description, Partition: f.Partition, WorkDir: f.WorkDir,
		Account: f.Account, QOS: f.QOS, Constraint: f.Constraint, Reservation: f.Reservation}
	if f.TimeLimit != "" {
		n, err := strconv.ParseInt(f.TimeLimit, 10, 64)
		if err != nil {
			f.Errors["default_time_limit"] = fmt.Sprintf("%q is not a whole number of seconds; enter one such as 7200, or leave it empty for the partition's default", f.TimeLimit)
		}
		c.DefaultTimeLimit = n
	}
	if pairs, err := parsePairs(f.JobTierQOS); err != nil {
		f.Errors["job_tier_qos"] = err.Error() + ", such as spot=scavenger, premium=high"
	} else if len(pairs) > 0 {
		c.JobTierQOS = pairs
	}
	if pairs, err := parsePairs(f.PriorityNice); err != nil {
		f.Errors["priority_nice"] = err.Error() + ", such as low=1000, medium=0"
	} else if len(pairs) > 0 {
		c.PriorityNice = map[string]int{}
		for _, k := range slices.Sorted(maps.Keys(pairs)) {
			n, err := strconv.Atoi(pairs[k])
			if err != nil {
				f.Errors["priority_nice"] = fmt.Sprintf("%s=%q: a nice value is a whole number, such as low=1000", k, pairs[k])
				break
			}
			c.PriorityNice[k] = n
		}
	}
	switch f.Where {
	case "local":
	case "ssh":
		c.Address, c.HostKey = f.Address, f.HostKey
		c.SSHSettings = &spec.SSHSettings{AdminUsername: f.User, AdminPassword: p.Get("admin_password"),
			SSHPrivateKey: privateKeyOf(r, f.Errors), SSHPrivateKeyPassphrase: p.Get("ssh_private_key_passphrase")}
		if f.Port != "" {
			n, err := strconv.Atoi(f.Port)
			if err != nil {
				f.Errors["ssh_port"] = fmt.Sprintf("%q is not a port number; enter one such as 22", f.Port)
			}
			c.SSHSettings.SSHPort = n
		}
		if f.Address == "" {
			f.Errors["address"] = "give the login node Ferry submits from (its name or address), or choose the server's own host above"
		}
		if c.SSHSettings.AdminPassword == "" && c.SSHSettings.SSHPrivateKey == "" && f.Errors["ssh_private_key_file"] == "" {
			f.Errors["secret"] = "give the password or the private key Ferry logs in to the login node with"
		}
	default:
		f.Where = "local"
		f.Errors["where"] = "choose where Ferry runs sbatch: on the server's own host or over SSH on a login node"
	}
	if len(f.Errors) == 0 {
		created, err := ss.api.CreateCompute(r.Context(), c)
		if err == nil {
			http.Redirect(w, r, "/studio/compute/"+url.PathEscape(created.Name)+"?msg="+url.QueryEscape("attached: sinfo answered and lists partition "+c.Partition), http.StatusSeeOther)
			return nil
		}
		if st := client.StatusOf(err); st == 0 || st >= 500 {
			return err
		}
		if m := offeredRE.FindStringSubmatch(err.Error()); m != nil && f.Where == "ssh" && f.HostKey == "" {
			f.Offered = strings.TrimSpace(m[1][strings.Index(m[1], "SHA256:"):])
		} else {
			f.Problem = placeFieldErrors(f.Errors, slurmFields, err)
		}
	}
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "slurmattach", "Attach a Slurm cluster", f)
	return nil
}

// parsePairs reads "k=v, k2=v2" (commas or line breaks between pairs).
func parsePairs(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not name=value; write pairs joined by commas", part)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s is given twice; give each name once", k)
		}
		m[k] = v
	}
	return m, nil
}
