package api

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"net/http"

	"github.com/ferry-ml/ferry/internal/auth"
)

func (s *Server) setRunValues(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.RunValues
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := s.ws.SetRunValues(r.Context(), who, r.PathValue("name"), req); err != nil {
		return nil, err
	}
	return map[string]int{"recorded": len(req.Params) + len(req.Tags)}, nil
}

func (s *Server) getRunValues(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.GetRunValues(r.Context(), r.PathValue("name"))
}
