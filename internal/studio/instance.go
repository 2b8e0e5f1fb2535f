package studio

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/compute/computeinstance"
	"github.com/ferry-ml/ferry/internal/spec"
)

// instanceForm is the create-instance form.
type instanceForm struct {
	Name, Size, Idle, StartCron, StopCron string
	Errors                                map[string]string
	Problem                               string
	Sizes                                 []sizeOption
}

func (s *Studio) instanceNew(w http.ResponseWriter, r *http.Request, ss *session) error {
	opts, err := s.sizeOptions(r, ss)
	if err != nil {
		return err
	}
	s.render(w, r, ss, "instancenew", "Create an instance", instanceForm{Size: "Standard_DS3_v2", Idle: "60", Sizes: opts, Errors: map[string]string{}})
	return nil
}

// instanceCreate makes a computeinstance spec of the form: size, idle
// shutdown, and start and stop schedules as cron expressions.
func (s *Studio) instanceCreate(w http.ResponseWriter, r *http.Request, ss *session) error {
	p := r.PostForm
	f := instanceForm{Name: strings.TrimSpace(p.Get("name")), Size: p.Get("size"), Idle: strings.TrimSpace(p.Get("idle_time_before_shutdown_minutes")),
		StartCron: strings.TrimSpace(p.Get("start_cron")), StopCron: strings.TrimSpace(p.Get("stop_cron")), Errors: map[string]string{}}
	c := &spec.Compute{Name: f.Name, Type: computeinstance.Type, Size: f.Size}
	if f.Idle != "" {
		n, err := strconv.Atoi(f.Idle)
		if err != nil {
			f.Errors["idle_time_before_shutdown_minutes"] = fmt.Sprintf("%q is not a whole number of minutes; enter one such as 60", f.Idle)
		}
		c.IdleTimeBeforeShutdownMins = &n
	}
	var sched []any
	for _, e := range []struct{ action, cron string }{{"start", f.StartCron}, {"stop", f.StopCron}} {
		if e.cron != "" {
			sched = append(sched, map[string]any{"action": e.action, "trigger": map[string]any{"type": "cron", "expression": e.cron}})
		}
	}
	if len(sched) > 0 {
		c.Schedules = map[string]any{"compute_start_stop": sched}
	}
	if len(f.Errors) == 0 {
		created, err := ss.api.CreateCompute(r.Context(), c)
		if err == nil {
			http.Redirect(w, r, "/studio/compute/"+url.PathEscape(created.Name), http.StatusSeeOther)
			return nil
		}
		if st := client.StatusOf(err); st == 0 || st >= 500 {
			return err
		}
		cf := clusterForm{Errors: f.Errors}
		placeErrors(&cf, err)
		f.Problem = cf.Problem
		// Schedule errors name a schedule by its index; show them by the
		// schedule fields.
		if strings.Contains(f.Problem, "schedules") {
			f.Errors["schedules"], f.Problem = f.Problem, ""
		}
	}
	opts, err := s.sizeOptions(r, ss)
	if err != nil {
		return err
	}
	f.Sizes = opts
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "instancenew", "Create an instance", f)
	return nil
}
