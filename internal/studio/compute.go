package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/compute/amlcompute"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// computeRow is one compute target in the list.
type computeRow struct {
	*apitypes.Compute
	Tier, IdleShutdown, IdleScaleDown string
}

func rowOf(c *apitypes.Compute) computeRow {
	row := computeRow{Compute: c}
	if sp := c.Spec; sp != nil {
		row.Tier = sp.Tier
		if m := sp.IdleTimeBeforeShutdownMins; m != nil { // instances only
			row.IdleShutdown = fmt.Sprintf("after %d min idle", *m)
		}
		if sec := sp.IdleTimeBeforeScaleDown; sec != nil { // clusters only
			row.IdleScaleDown = fmt.Sprintf("%d s", *sec)
		}
	}
	return row
}

// settling reports whether the compute is between states, so its page
// shows the operation's progress and refreshes until it settles.
func settling(c *apitypes.Compute, nodes []*apitypes.Node) bool {
	switch c.State {
	case "Creating", "Resizing", "Deleting", "SettingUp", "Starting", "Stopping", "Restarting":
		return true
	}
	for _, n := range nodes {
		if n.State == "Provisioning" || n.State == "Draining" {
			return true
		}
	}
	return false
}

func (s *Studio) computeList(w http.ResponseWriter, r *http.Request, ss *session) error {
	cs, err := ss.api.ListComputes(r.Context())
	if err != nil {
		return err
	}
	rows := make([]computeRow, len(cs))
	for i, c := range cs {
		rows[i] = rowOf(c)
	}
	s.render(w, r, ss, "compute", "Compute", map[string]any{"Computes": rows, "Message": r.URL.Query().Get("msg")})
	return nil
}

type computeDetailView struct {
	computeRow
	Nodes      []*apitypes.Node
	Events     []apitypes.ComputeEvent
	Jobs       []*apitypes.Job
	Settling   bool
	NodesErr   string
	Message    string
	Resize     resizeForm
	IsCluster  bool
	IsInstance bool
	// InstanceTypes are a Kubernetes compute's, as kept at attach.
	InstanceTypes []kubeInstanceTypeRow
}

func (s *Studio) computeDetail(w http.ResponseWriter, r *http.Request, ss *session) error {
	return s.renderComputeDetail(w, r, ss, r.PathValue("name"), nil, http.StatusOK)
}

// renderComputeDetail renders a compute's page; resize, when not nil, is
// a resize form sent back with its errors.
func (s *Studio) renderComputeDetail(w http.ResponseWriter, r *http.Request, ss *session, name string, resize *resizeForm, status int) error {
	ctx := r.Context()
	c, err := ss.api.GetCompute(ctx, name)
	if err != nil {
		return err
	}
	v := computeDetailView{computeRow: rowOf(c), Message: r.URL.Query().Get("msg")}
	v.IsCluster, v.IsInstance = isCluster(v.computeRow), isInstance(v.computeRow)
	v.Resize = resizeOf(v.computeRow)
	if c.Type == "kubernetes" {
		v.InstanceTypes = kubeInstanceTypes(c.Spec)
	}
	if resize != nil {
		v.Resize = *resize
	}
	if c.MaxNodes != nil { // a pool: it has nodes
		if v.Nodes, err = ss.api.ListNodes(ctx, name); err != nil {
			v.NodesErr = err.Error()
		}
	}
	if v.Events, err = ss.api.ComputeEvents(ctx, name); err != nil {
		return err
	}
	slices.Reverse(v.Events) // newest first
	if len(v.Events) > 100 {
		v.Events = v.Events[:100]
	}
	if v.Jobs, err = ss.api.ListJobs(ctx, url.Values{"compute": {name}, "limit": {"20"}}); err != nil {
		return err
	}
	v.Settling = settling(c, v.Nodes) && resize == nil
	s.render(withStatus(w, status), r, ss, "computedetail", "Compute "+name, v)
	return nil
}

// sizeOption is a size in the create-cluster form, with what is left of
// its family's quota.
type sizeOption struct {
	sizes.Size
	QuotaLeft, QuotaLimit int
	HasQuota              bool
}

func (o sizeOption) Label() string {
	l := fmt.Sprintf("%s — %d cores, %g GiB", o.Name, o.VCPUs, o.MemoryGiB)
	if o.GPUs > 0 {
		l += fmt.Sprintf(", %d × %s GPU", o.GPUs, o.GPUType)
	}
	if o.HasQuota {
		l += fmt.Sprintf(" — %s: %d of %d cores left", o.Family, o.QuotaLeft, o.QuotaLimit)
	}
	if o.Restricted {
		l += " (restricted)"
	}
	return l
}

// clusterForm is the create-cluster form: what was entered, and the
// errors beside each field.
type clusterForm struct {
	Name, Size, Min, Max, Idle, Tier string
	Errors                           map[string]string
	Problem                          string // an error that names no field
	Sizes                            []sizeOption
}

// formFields are the fields of clusterForm, as the API names them.
var formFields = []string{"name", "size", "min_instances", "max_instances", "idle_time_before_scale_down", "tier", "idle_time_before_shutdown_minutes"}

func (s *Studio) sizeOptions(r *http.Request, ss *session) ([]sizeOption, error) {
	szs, err := ss.api.ListSizes(r.Context())
	if err != nil {
		return nil, err
	}
	qs, err := ss.api.ListQuotas(r.Context())
	if err != nil {
		return nil, err
	}
	left := map[string]apitypes.Quota{}
	for _, q := range qs {
		left[q.Family] = q
	}
	out := make([]sizeOption, len(szs))
	for i, sz := range szs {
		out[i] = sizeOption{Size: sz}
		if q, ok := left[sz.Family]; ok {
			out[i].HasQuota, out[i].QuotaLimit, out[i].QuotaLeft = true, q.Limit, max(q.Limit-q.Used, 0)
		}
	}
	return out, nil
}

func (s *Studio) computeNew(w http.ResponseWriter, r *http.Request, ss *session) error {
	opts, err := s.sizeOptions(r, ss)
	if err != nil {
		return err
	}
	f := clusterForm{Min: "0", Max: "4", Idle: "120", Tier: "dedicated", Size: "Standard_DS3_v2", Sizes: opts, Errors: map[string]string{}}
	s.render(w, r, ss, "computenew", "Create a cluster", f)
	return nil
}

// computeCreate makes an amlcompute spec of the form and sends it to the
// API; its field errors go back beside the fields they name.
func (s *Studio) computeCreate(w http.ResponseWriter, r *http.Request, ss *session) error {
	p := r.PostForm
	f := clusterForm{Name: strings.TrimSpace(p.Get("name")), Size: p.Get("size"), Min: strings.TrimSpace(p.Get("min_instances")),
		Max: strings.TrimSpace(p.Get("max_instances")), Idle: strings.TrimSpace(p.Get("idle_time_before_scale_down")), Tier: p.Get("tier"),
		Errors: map[string]string{}}
	c := &spec.Compute{Name: f.Name, Type: amlcompute.Type, Size: f.Size, Tier: f.Tier}
	whole := func(field, v, example string) *int {
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			f.Errors[field] = fmt.Sprintf("%q is not a whole number; enter one such as %s", v, example)
			return nil
		}
		return &n
	}
	c.MinInstances = whole("min_instances", f.Min, "0")
	c.MaxInstances = whole("max_instances", f.Max, "4")
	c.IdleTimeBeforeScaleDown = whole("idle_time_before_scale_down", f.Idle, "120 (seconds)")
	if len(f.Errors) == 0 {
		created, err := ss.api.CreateCompute(r.Context(), c)
		if err == nil {
			http.Redirect(w, r, "/studio/compute/"+url.PathEscape(created.Name), http.StatusSeeOther)
			return nil
		}
		if client.StatusOf(err) == 0 || client.StatusOf(err) >= 500 {
			return err
		}
		placeErrors(&f, err)
	}
	opts, err := s.sizeOptions(r, ss)
	if err != nil {
		return err
	}
	f.Sizes = opts
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "computenew", "Create a cluster", f)
	return nil
}

// placeErrors puts an API error's field errors beside the form's fields;
// what names no field of the form is shown above it.
func placeErrors(f *clusterForm, err error) {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		f.Problem = err.Error()
		return
	}
	var rest []string
	for _, fe := range ae.Errors {
		if slices.Contains(formFields, fe.Field) {
			if f.Errors[fe.Field] != "" {
				f.Errors[fe.Field] += "; "
			}
			f.Errors[fe.Field] += fe.Message
			continue
		}
		rest = append(rest, fe.Error())
	}
	if len(ae.Errors) == 0 {
		// A workspace error ("size X: ...", "compute X exists") names its
		// field in its first words when it has one.
		for _, field := range formFields {
			if strings.HasPrefix(ae.Detail, field+" ") || strings.HasPrefix(ae.Detail, field+":") {
				f.Errors[field] = ae.Detail
				return
			}
		}
		rest = append(rest, ae.Detail)
	}
	f.Problem = strings.Join(rest, "\n")
}

func (s *Studio) quotaList(w http.ResponseWriter, r *http.Request, ss *session) error {
	qs, err := ss.api.ListQuotas(r.Context())
	if err != nil {
		return err
	}
	s.render(w, r, ss, "quotas", "Quotas", qs)
	return nil
}
