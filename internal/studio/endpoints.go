package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
)

type endpointRow struct {
	*apitypes.OnlineEndpoint
	Split string // "blue 90 %, green 10 %"
}

func splitText(traffic map[string]int) string {
	names := make([]string, 0, len(traffic))
	for n := range traffic {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d %%", n, traffic[n]))
	}
	return strings.Join(parts, ", ")
}

func (s *Studio) endpointList(w http.ResponseWriter, r *http.Request, ss *session) error {
	eps, err := ss.api.ListOnlineEndpoints(r.Context())
	if err != nil {
		return err
	}
	rows := make([]endpointRow, len(eps))
	for i, e := range eps {
		rows[i] = endpointRow{OnlineEndpoint: e, Split: splitText(e.Traffic)}
	}
	beps, err := ss.api.ListBatchEndpoints(r.Context())
	if err != nil {
		return err
	}
	batch := make([]batchEndpointRow, len(beps))
	for i, e := range beps {
		batch[i] = batchEndpointRow{BatchEndpoint: e}
		if e.BatchEndpoint != nil {
			batch[i].DefaultName = e.DefaultDeployment()
		}
	}
	s.render(w, r, ss, "endpoints", "Endpoints", map[string]any{"Online": rows, "Batch": batch})
	return nil
}

// batchEndpointRow is a batch endpoint in the endpoints list.
type batchEndpointRow struct {
	*apitypes.BatchEndpoint
	DefaultName string
}

// trafficRow is one deployment in the traffic form.
type trafficRow struct {
	*apitypes.OnlineDeployment
	Percent string
	Ready   int
}

type endpointView struct {
	endpointRow
	Deployments  []trafficRow
	TrafficError string
	Message      string
	// The test box: what was sent, to which deployment, and the answer.
	TestBody, TestDeployment, TestAnswer, TestError string
	TestTook                                        string
}

func (s *Studio) endpointView(ctx context.Context, ss *session, name string) (*endpointView, error) {
	e, err := ss.api.GetOnlineEndpoint(ctx, name)
	if err != nil {
		return nil, err
	}
	deps, err := ss.api.ListOnlineDeployments(ctx, name)
	if err != nil {
		return nil, err
	}
	v := &endpointView{endpointRow: endpointRow{OnlineEndpoint: e, Split: splitText(e.Traffic)}, TestBody: `{"data": [[1, 2, 3, 4]]}`}
	for _, d := range deps {
		row := trafficRow{OnlineDeployment: d, Percent: strconv.Itoa(e.Traffic[d.Name])}
		for _, rep := range d.Replicas {
			if rep.State == apitypes.ReplicaReady {
				row.Ready++
			}
		}
		v.Deployments = append(v.Deployments, row)
	}
	sort.Slice(v.Deployments, func(a, b int) bool { return v.Deployments[a].Name < v.Deployments[b].Name })
	return v, nil
}

func (s *Studio) endpointDetail(w http.ResponseWriter, r *http.Request, ss *session) error {
	v, err := s.endpointView(r.Context(), ss, r.PathValue("name"))
	if err != nil {
		return err
	}
	v.Message = r.URL.Query().Get("msg")
	s.render(w, r, ss, "endpoint", "Endpoint "+v.Name, v)
	return nil
}

// endpointTraffic sets the traffic split from the form's traffic.NAME
// fields through the API (PATCH), which checks it as it does `ferry
// online-endpoint update --traffic`; a refusal is shown beside the form.
func (s *Studio) endpointTraffic(w http.ResponseWriter, r *http.Request, ss *session) error {
	ctx, name := r.Context(), r.PathValue("name")
	v, err := s.endpointView(ctx, ss, name)
	if err != nil {
		return err
	}
	traffic := map[string]int{}
	var bad []string
	for i := range v.Deployments {
		d := &v.Deployments[i]
		d.Percent = strings.TrimSpace(r.PostForm.Get("traffic." + d.Name))
		n, err := strconv.Atoi(d.Percent)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %q is not a whole percent; enter one from 0 to 100", d.Name, d.Percent))
			continue
		}
		traffic[d.Name] = n
	}
	if len(bad) == 0 {
		_, err = ss.api.UpdateOnlineEndpoint(ctx, name, apitypes.EndpointUpdate{Traffic: traffic})
		if err == nil {
			http.Redirect(w, r, "/studio/endpoints/"+url.PathEscape(name)+"?msg="+url.QueryEscape("traffic set: "+splitText(traffic)), http.StatusSeeOther)
			return nil
		}
		if s := client.StatusOf(err); s == 0 || s >= 500 {
			return err
		}
		bad = append(bad, err.Error())
	}
	v.TrafficError = strings.Join(bad, "\n")
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "endpoint", "Endpoint "+name, v)
	return nil
}

// maxTestBody bounds what the test box sends and shows back.
const maxTestBody = 256 << 10

// endpointTest sends the test box's body to the endpoint's scoring URI
// with the endpoint's key, which the server reads through the API
// (list-keys, an owner's call) and never puts in the page.
func (s *Studio) endpointTest(w http.ResponseWriter, r *http.Request, ss *session) error {
	ctx, name := r.Context(), r.PathValue("name")
	v, err := s.endpointView(ctx, ss, name)
	if err != nil {
		return err
	}
	v.TestBody, v.TestDeployment = r.PostForm.Get("body"), r.PostForm.Get("deployment")
	switch {
	case len(v.TestBody) > maxTestBody:
		v.TestError = fmt.Sprintf("the request is %d bytes; the test box sends at most %d", len(v.TestBody), maxTestBody)
	case !json.Valid([]byte(v.TestBody)):
		v.TestError = "the request is not JSON; scoring scripts take a JSON body such as {\"data\": [[1, 2, 3, 4]]}"
	}
	if v.TestError == "" {
		keys, err := ss.api.GetEndpointCredentials(ctx, name)
		if err != nil {
			return err
		}
		tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		start := time.Now()
		answer, err := ss.api.Score(tctx, v.ScoringURI, keys.Credential(), v.TestDeployment, strings.NewReader(v.TestBody))
		v.TestTook = time.Since(start).Round(time.Millisecond).String()
		var se *client.ScoreError
		switch {
		case errors.As(err, &se):
			v.TestError = se.Error()
		case err != nil:
			return err
		default:
			if len(answer) > maxTestBody {
				answer = append(answer[:maxTestBody], "\n… (cut)"...)
			}
			v.TestAnswer = string(answer)
		}
	}
	s.render(w, r, ss, "endpoint", "Endpoint "+name, v)
	return nil
}
