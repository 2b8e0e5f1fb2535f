package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/compute/amlcompute"
	"github.com/ferry-ml/ferry/internal/compute/computeinstance"
)

// resizeForm is the resize form on a cluster's page.
type resizeForm struct {
	Min, Max, Idle string
	Errors         map[string]string
	Problem        string
}

func resizeOf(row computeRow) resizeForm {
	f := resizeForm{Errors: map[string]string{}}
	if row.MinNodes != nil {
		f.Min = strconv.Itoa(*row.MinNodes)
	}
	if row.MaxNodes != nil {
		f.Max = strconv.Itoa(*row.MaxNodes)
	}
	if sp := row.Spec; sp != nil && sp.IdleTimeBeforeScaleDown != nil {
		f.Idle = strconv.Itoa(*sp.IdleTimeBeforeScaleDown)
	}
	return f
}

// computeResize changes a cluster's bounds (POST /v1/computes/NAME/resize).
func (s *Studio) computeResize(w http.ResponseWriter, r *http.Request, ss *session) error {
	name := r.PathValue("name")
	p := r.PostForm
	f := resizeForm{Min: strings.TrimSpace(p.Get("min_instances")), Max: strings.TrimSpace(p.Get("max_instances")),
		Idle: strings.TrimSpace(p.Get("idle_time_before_scale_down")), Errors: map[string]string{}}
	whole := func(field, v string) *int {
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			f.Errors[field] = fmt.Sprintf("%q is not a whole number", v)
			return nil
		}
		return &n
	}
	req := apitypes.ResizeRequest{MinInstances: whole("min_instances", f.Min), MaxInstances: whole("max_instances", f.Max),
		IdleTimeBeforeScaleDown: whole("idle_time_before_scale_down", f.Idle)}
	if len(f.Errors) == 0 {
		_, err := ss.api.ResizeCompute(r.Context(), name, req)
		if err == nil {
			http.Redirect(w, r, "/studio/compute/"+url.PathEscape(name)+"?msg="+url.QueryEscape("resized"), http.StatusSeeOther)
			return nil
		}
		if st := client.StatusOf(err); st == 0 || st >= 500 {
			return err
		}
		cf := clusterForm{Errors: f.Errors}
		placeErrors(&cf, err)
		f.Problem = cf.Problem
	}
	return s.renderComputeDetail(w, r, ss, name, &f, http.StatusUnprocessableEntity)
}

// computeAction starts, stops or restarts an instance.
func (s *Studio) computeAction(w http.ResponseWriter, r *http.Request, ss *session) error {
	name, action := r.PathValue("name"), r.PostForm.Get("action")
	if action != "start" && action != "stop" && action != "restart" {
		http.Error(w, "action: "+strconv.Quote(action)+" is not start, stop or restart", http.StatusBadRequest)
		return nil
	}
	c, err := ss.api.InstanceAction(r.Context(), name, action)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/studio/compute/"+url.PathEscape(name)+"?msg="+url.QueryEscape(action+" asked: the instance is "+c.State), http.StatusSeeOther)
	return nil
}

// computeDeletePage asks to confirm a delete (or a detach) by typing the
// compute's name.
func (s *Studio) computeDeletePage(w http.ResponseWriter, r *http.Request, ss *session) error {
	c, err := ss.api.GetCompute(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	s.render(w, r, ss, "computedelete", "Delete "+c.Name, map[string]any{"Compute": c, "Attached": isAttached(c)})
	return nil
}

func (s *Studio) computeDelete(w http.ResponseWriter, r *http.Request, ss *session) error {
	name := r.PathValue("name")
	if r.PostForm.Get("confirm") != name {
		c, err := ss.api.GetCompute(r.Context(), name)
		if err != nil {
			return err
		}
		s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "computedelete", "Delete "+name, map[string]any{"Compute": c, "Attached": isAttached(c),
			"Error": "type the compute's name, " + name + ", to confirm"})
		return nil
	}
	if err := ss.api.DeleteCompute(r.Context(), name); err != nil {
		return err
	}
	http.Redirect(w, r, "/studio/compute?msg="+url.QueryEscape("delete of "+name+" asked: its machines are given back, then it is gone"), http.StatusSeeOther)
	return nil
}

// isAttached reports whether deleting the compute detaches something
// that exists without Ferry (a machine, a Slurm cluster) rather than
// giving back machines Ferry made.
func isAttached(c *apitypes.Compute) bool {
	return c.Size == "attached" || c.Type == "slurm" || c.Type == "kubernetes"
}

// isCluster and isInstance say which forms a compute's page offers.
func isCluster(c computeRow) bool  { return c.Type == amlcompute.Type }
func isInstance(c computeRow) bool { return c.Type == computeinstance.Type }
