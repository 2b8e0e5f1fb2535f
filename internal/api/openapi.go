package api

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/ferry-ml/ferry/internal/auth"
)

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// openapi builds the OpenAPI 3.1 document from the route table.
func (s *Server) openapi(*http.Request, auth.Principal) (any, error) {
	paths := map[string]map[string]any{}
	for _, rt := range s.routes {
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": operationID(rt),
			"responses": map[string]any{
				"200":     map[string]any{"description": "OK"},
				"default": map[string]any{"description": "An error", "content": map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}}},
			},
		}
		if rt.upgrade {
			op["responses"].(map[string]any)["101"] = map[string]any{"description": "Switching Protocols: the connection carries the session's SSH stream from here on"}
			delete(op["responses"].(map[string]any), "200")
		}
		if rt.public {
			op["security"] = []any{}
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		paths[rt.path][strings.ToLower(rt.method)] = op
	}
	return map[string]any{
		"openapi":  "3.1.0",
		"info":     map[string]any{"title": "Ferry workspace API", "version": "v1"},
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas": map[string]any{
				"Problem": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"type": map[string]any{"type": "string"}, "title": map[string]any{"type": "string"},
						"status": map[string]any{"type": "integer"}, "detail": map[string]any{"type": "string"},
						"errors": map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
					},
				},
			},
		},
	}, nil
}

func operationID(rt route) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(rt.method))
	for _, part := range strings.Split(rt.path, "/") {
		part = strings.Trim(part, "{}")
		if part == "" || part == "v1" {
			continue
		}
		for _, w := range strings.FieldsFunc(part, func(r rune) bool { return r == '_' || r == '.' || r == '-' }) {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}
