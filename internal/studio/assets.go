package studio

import (
	"net/http"
	"sort"
)

// environmentList shows the registered environments, every version.
func (s *Studio) environmentList(w http.ResponseWriter, r *http.Request, ss *session) error {
	envs, err := ss.api.ListEnvironments(r.Context(), "")
	if err != nil {
		return err
	}
	sort.SliceStable(envs, func(a, b int) bool { return envs[a].Name < envs[b].Name })
	s.render(w, r, ss, "environments", "Environments", envs)
	return nil
}

// modelList shows the registered models (?archived=1 with the archived).
func (s *Studio) modelList(w http.ResponseWriter, r *http.Request, ss *session) error {
	archived := r.URL.Query().Get("archived") != ""
	ms, err := ss.api.ListModels(r.Context(), "", archived)
	if err != nil {
		return err
	}
	sort.SliceStable(ms, func(a, b int) bool { return ms[a].Name < ms[b].Name })
	s.render(w, r, ss, "models", "Models", map[string]any{"Models": ms, "Archived": archived})
	return nil
}
