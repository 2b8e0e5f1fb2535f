package studio

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// kubeForm is the attach-a-Kubernetes-cluster form: the fields of a
// `type: kubernetes` compute file. The kubeconfig (pasted or chosen as a
// file) is read from the request and never written back into a page: a
// form shown again asks for it again.
type kubeForm struct {
	Name, Description, Namespace, APIURL, Image string
	// InstanceTypes is the instance_types map as YAML, as typed;
	// DefaultInstanceType names one of them.
	InstanceTypes, DefaultInstanceType string
	Errors                             map[string]string
	Problem                            string
}

// kubeFields are the form's fields as the API names them in errors (spec
// validation and the target's attach check). placeFieldErrors looks a
// field up without its last parts too, so every
// instance_types.NAME.resources... error lands beside instance_types.
var kubeFields = map[string]string{
	"name": "name", "description": "description", "namespace": "namespace",
	"kubeconfig": "kubeconfig", "kubeconfig_content": "kubeconfig",
	"api_url": "api_url", "image": "image",
	"instance_types": "instance_types", "default_instance_type": "default_instance_type",
}

// maxKubeconfigFile is the largest kubeconfig file the form takes; one
// with a few clusters and embedded certificates is a few KiB.
const maxKubeconfigFile = 256 << 10

func (s *Studio) kubeNew(w http.ResponseWriter, r *http.Request, ss *session) error {
	s.render(w, r, ss, "kubeattach", "Attach a Kubernetes cluster", kubeForm{Namespace: "default", Errors: map[string]string{}})
	return nil
}

// kubeCreate sends a kubernetes compute to the API, as `ferry compute
// attach -f k8s.yml` does (the CLI reads the kubeconfig file and sends its
// content; so does the form). The API checks the cluster before storing
// anything (the API server answers, the namespace exists, the credentials
// may do what Ferry does there), so a compute that comes back is ready; a
// refusal names the field (a missing permission names the kubeconfig),
// and the form is shown again with the error beside it.
func (s *Studio) kubeCreate(w http.ResponseWriter, r *http.Request, ss *session) error {
	p := r.PostForm
	get := func(k string) string { return strings.TrimSpace(p.Get(k)) }
	f := kubeForm{Name: get("name"), Description: get("description"), Namespace: get("namespace"), APIURL: get("api_url"),
		Image: get("image"), InstanceTypes: strings.TrimRight(p.Get("instance_types"), " \t\r\n"), DefaultInstanceType: get("default_instance_type"),
		Errors: map[string]string{}}
	c := &spec.Compute{Name: f.Name, Type: "kubernetes", Description: f.Description, Namespace: f.Namespace,
		KubeAPIURL: f.APIURL, Image: f.Image, DefaultInstanceType: f.DefaultInstanceType}
	// As the CLI sends it: the file's name (shown as where it came
	// from) with its content, which the server seals.
	c.Kubeconfig, c.KubeconfigContent = kubeconfigOf(r, f.Errors)
	if strings.TrimSpace(f.InstanceTypes) != "" {
		var its map[string]spec.KubeInstanceType
		dec := yaml.NewDecoder(strings.NewReader(f.InstanceTypes))
		dec.KnownFields(true)
		if err := dec.Decode(&its); err != nil {
			f.Errors["instance_types"] = "not a map of instance types in YAML (" + yamlMessage(err) + "); write them as in a compute file, such as\ncpu-small:\n  resources:\n    requests: {cpu: 500m, memory: 1Gi}"
		} else {
			c.InstanceTypes = its
		}
	}
	if f.DefaultInstanceType != "" && len(c.InstanceTypes) == 0 && f.Errors["instance_types"] == "" {
		f.Errors["default_instance_type"] = fmt.Sprintf("%q names no instance type: give the instance types above, or leave it empty", f.DefaultInstanceType)
	}
	if len(f.Errors) == 0 {
		created, err := ss.api.CreateCompute(r.Context(), c)
		if err == nil {
			msg := "attached: the API server answered, the namespace exists and the credentials may do what Ferry does there"
			http.Redirect(w, r, "/studio/compute/"+url.PathEscape(created.Name)+"?msg="+url.QueryEscape(msg), http.StatusSeeOther)
			return nil
		}
		if st := client.StatusOf(err); st == 0 || st >= 500 {
			return err
		}
		f.Problem = placeFieldErrors(f.Errors, kubeFields, err)
	}
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "kubeattach", "Attach a Kubernetes cluster", f)
	return nil
}

// yamlMessage is a YAML decoder's error without its "yaml: " prefix.
func yamlMessage(err error) string {
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), "yaml: ")
}

// kubeconfigOf is the kubeconfig the form gives, pasted into kubeconfig or
// chosen as the file kubeconfig_file (with the file's name), or "" when
// neither is given. Both
// given, a file over maxKubeconfigFile, or one that is empty or not text
// is refused in errs["kubeconfig"].
func kubeconfigOf(r *http.Request, errs map[string]string) (name, content string) {
	pasted := strings.TrimSpace(r.PostForm.Get("kubeconfig"))
	var file string
	if r.MultipartForm != nil && len(r.MultipartForm.File["kubeconfig_file"]) > 0 {
		fh := r.MultipartForm.File["kubeconfig_file"][0]
		switch {
		case fh.Filename == "" && fh.Size == 0: // no file chosen
		case fh.Size > maxKubeconfigFile:
			errs["kubeconfig"] = fmt.Sprintf("%s is %d bytes; a kubeconfig file is at most %d KiB: choose the kubeconfig itself (such as ~/.kube/config)", fh.Filename, fh.Size, maxKubeconfigFile>>10)
			return "", ""
		default:
			b, err := readFileHeader(fh, maxKubeconfigFile)
			if err != nil {
				errs["kubeconfig"] = fmt.Sprintf("%s could not be read: %v; choose it again", fh.Filename, err)
				return "", ""
			}
			file = strings.TrimSpace(string(b))
			if file == "" || !utf8.ValidString(file) || strings.ContainsRune(file, 0) {
				errs["kubeconfig"] = fmt.Sprintf("%s is empty or not text; choose a kubeconfig file (YAML, such as ~/.kube/config)", fh.Filename)
				return "", ""
			}
			name = fh.Filename
		}
	}
	if pasted != "" && file != "" {
		errs["kubeconfig"] = "give the kubeconfig once: paste its text or choose its file, not both"
		return "", ""
	}
	if k := pasted + file; k != "" {
		return name, k + "\n"
	}
	return "", ""
}

// kubeInstanceTypeRow is one instance type on a Kubernetes compute's page.
type kubeInstanceTypeRow struct {
	Name                           string
	Default                        bool
	Requests, Limits, NodeSelector string
	Tolerations                    int
}

// kubeInstanceTypes lists c's instance types by name, with their
// quantities as name=value pairs.
func kubeInstanceTypes(c *spec.Compute) []kubeInstanceTypeRow {
	if c == nil {
		return nil
	}
	pairs := func(m map[string]string) string {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, k+"="+m[k])
		}
		return strings.Join(out, ", ")
	}
	var rows []kubeInstanceTypeRow
	types := c.AllInstanceTypes()
	for _, name := range slices.Sorted(maps.Keys(types)) {
		it := types[name]
		rows = append(rows, kubeInstanceTypeRow{Name: name, Default: name == c.DefaultInstanceType,
			Requests: pairs(it.Resources.Requests), Limits: pairs(it.Resources.Limits), NodeSelector: pairs(it.NodeSelector), Tolerations: len(it.Tolerations)})
	}
	return rows
}
