package studio_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/client"
)

// kubeconfigWithToken is a kubeconfig whose user is a bearer token, for
// tests that check the token never comes back in a page.
func kubeconfigWithToken(server, token, namespace string) string {
	return `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: ` + token + `}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ` + namespace + `}}]
current-context: x
`
}

// The Kubernetes attach form's own checks and the API's validation come
// back beside their fields without a cluster (nothing reaches an API
// server): a namespace that is no Kubernetes name, an API URL that is
// not one, an image with a space, instance types that are not YAML or
// have a bad quantity, a default instance type that is none of them, a
// kubeconfig both pasted and chosen as a file. What was typed is kept;
// the kubeconfig (and its token) never is; nothing is stored.
func TestStudioKubeFormRefusalsBesideFields(t *testing.T) {
	s := startServer(t)
	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	resp, err = hc.Get(s.url + "/studio/compute/attach-kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	for _, want := range []string{`enctype="multipart/form-data"`, `name="kubeconfig_file"`, `type="file"`, `name="namespace"`, `name="api_url"`, `name="image"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Kubernetes attach page lacks %s", want)
		}
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the Kubernetes attach page has no CSRF field")
	}
	const token = "TOKEN-not-shown-4f1c9a"
	kc := kubeconfigWithToken("https://127.0.0.1:1", token, "jobs")
	csrf := m[1]
	post := func(fields map[string]string, file string) (int, string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("csrf", csrf)
		for k, v := range fields {
			mw.WriteField(k, v)
		}
		fw, err := mw.CreateFormFile("kubeconfig_file", "config")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(file))
		mw.Close()
		resp, err := hc.Post(s.url+"/studio/compute/attach-kubernetes", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tc := range []struct {
		what   string
		fields map[string]string
		file   string // the kubeconfig file chosen
		field  string // the id of the error's element
		want   string
	}{
		{"a namespace with capitals", map[string]string{"namespace": "Ferry_Jobs"}, kc, "namespace-error", "is not a Kubernetes namespace name"},
		{"an API URL without a scheme", map[string]string{"api_url": "10.0.0.1:6443"}, kc, "api_url-error", "is not the URL of a Kubernetes API server"},
		{"an image with a space", map[string]string{"image": "python 3.12"}, kc, "image-error", "is not an image reference"},
		{"instance types that are not YAML", map[string]string{"instance_types": "cpu-small: [requests"}, kc, "instance_types-error", "not a map of instance types in YAML"},
		{"an instance type with a field it lacks", map[string]string{"instance_types": "cpu-small:\n  cpus: 2"}, kc, "instance_types-error", "field cpus not found"},
		{"a quantity in words", map[string]string{"instance_types": "cpu-small:\n  resources:\n    requests: {cpu: lots}"}, kc, "instance_types-error", "is not a quantity such as 500m"},
		{"a default that is none of them", map[string]string{"instance_types": "cpu-small:\n  resources:\n    limits: {cpu: \"2\"}", "default_instance_type": "gpu-one"}, kc, "default_instance_type-error", "is none of instance_types (cpu-small)"},
		{"a default without instance types", map[string]string{"default_instance_type": "gpu-one"}, kc, "default_instance_type-error", "names no instance type"},
		{"a kubeconfig pasted and chosen", map[string]string{"kubeconfig": kc}, kc, "kubeconfig-error", "paste its text or choose its file, not both"},
		{"a kubeconfig file that is not text", nil, "\x00\x01\x02", "kubeconfig-error", "is empty or not text"},
	} {
		fields := map[string]string{"name": "k8s", "namespace": "jobs", "description": "the lab's cluster"}
		for k, v := range tc.fields {
			fields[k] = v
		}
		status, page := post(fields, tc.file)
		if status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", tc.what, status)
		}
		i := strings.Index(page, `id="`+tc.field+`"`)
		if i < 0 || !strings.Contains(page[i:min(len(page), i+400)], tc.want) {
			t.Errorf("%s: the page has no %s saying %q", tc.what, tc.field, tc.want)
		}
		if !strings.Contains(page, `value="the lab&#39;s cluster"`) {
			t.Errorf("%s: the page lost the description that was typed", tc.what)
		}
		if strings.Contains(page, token) || strings.Contains(page, "current-context") {
			t.Errorf("%s: the page shows the kubeconfig that was sent", tc.what)
		}
	}
	// A valid form with a wrong CSRF token is refused before anything.
	csrf = "not-the-token"
	if status, page := post(map[string]string{"name": "k8s", "namespace": "jobs"}, kc); status != http.StatusForbidden || !strings.Contains(page, "CSRF") || strings.Contains(page, token) {
		t.Errorf("a Kubernetes attach with a wrong CSRF token: %d %q, want 403 naming the CSRF token", status, page)
	}
	if _, err := s.client().GetCompute(context.Background(), "k8s"); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("after refused forms, GetCompute(k8s) = %v, want not found", err)
	}
}
