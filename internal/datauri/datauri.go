// Package datauri reads the paths that job inputs and data assets name
// (Azure ML v2 files): a local path, a registered asset (azureml:NAME:VERSION),
// an http(s) URL, an Azure blob container (wasbs://, https://ACCOUNT.blob...,
// abfss://) or a datastore path (azureml://datastores/NAME/paths/PATH). It
// only parses: the workspace resolves datastores and the runner fetches.
package datauri

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Kind is what a path names.
type Kind int

// The kinds of path.
const (
	Local     Kind = iota // a local file or folder (or file:PATH)
	Asset                 // a registered data asset: azureml:NAME:VERSION or azureml:NAME@latest
	HTTP                  // an http:// or https:// URL that is not a blob container's
	Blob                  // a file or folder of an Azure blob container
	Datastore             // a path in a datastore: azureml://datastores/NAME/paths/PATH
)

// URI is a parsed input path.
type URI struct {
	Kind Kind
	Raw  string // as written
	// URL is the http(s) URL of an HTTP path.
	URL string
	// Account, Container and Path (no leading '/', "" for the whole
	// container) of a Blob path; Host is the account's host as written
	// (ACCOUNT.blob.core.windows.net).
	Account, Container, Host string
	// Path of a Blob or Datastore path ("" for its root).
	Path string
	// Store is the datastore's name of a Datastore path.
	Store string
}

var (
	schemeRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// A blob host: ACCOUNT.blob.core.windows.net (or another cloud's
	// suffix); ADLS Gen2's dfs host serves the same account.
	blobHostRe    = regexp.MustCompile(`^([a-z0-9]{3,24})\.(blob|dfs)\.(core\.[a-z0-9.]+)$`)
	containerRe   = regexp.MustCompile(`^(\$root|\$web|[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62})$`)
	datastoreRe   = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)
	datastoreLong = regexp.MustCompile(`^subscriptions/[^/]+/resource[gG]roups/[^/]+/(?:providers/Microsoft\.MachineLearningServices/)?workspaces/[^/]+/datastores/`)
)

// IsRemote says whether p names something other than a local path: any
// scheme but file:.
func IsRemote(p string) bool {
	return schemeRe.MatchString(p) && !strings.HasPrefix(p, "file:")
}

// Parse reads an input path. A local path (no scheme, or file:) and a data
// asset reference are returned as such without further checks (the spec
// checks references); every remote form is checked, and one Ferry cannot
// read is an error that says what it can.
func Parse(p string) (URI, error) {
	u := URI{Raw: p}
	switch {
	case !IsRemote(p):
		u.Kind = Local
		return u, nil
	case strings.HasPrefix(p, "azureml:") && !strings.HasPrefix(p, "azureml://"):
		u.Kind = Asset
		return u, nil
	}
	if strings.ContainsAny(p, "\x00\r\n") {
		return u, fmt.Errorf("%s holds a control character", strconv.Quote(p))
	}
	scheme, _, _ := strings.Cut(p, ":")
	switch strings.ToLower(scheme) {
	case "http", "https":
		return parseHTTP(u)
	case "wasbs", "wasb", "abfss", "abfs":
		return parseContainerURI(u)
	case "azureml":
		return parseAzureML(u)
	}
	return u, fmt.Errorf("%s: %s:// paths cannot be read here; use an http(s) URL, wasbs://CONTAINER@ACCOUNT.blob.core.windows.net/PATH, azureml://datastores/NAME/paths/PATH, azureml:NAME:VERSION or a local path", quoteShort(p), scheme)
}

func parseHTTP(u URI) (URI, error) {
	pu, err := url.Parse(u.Raw)
	if err != nil {
		return u, fmt.Errorf("%s is not a URL: %v", quoteShort(u.Raw), err)
	}
	if pu.Host == "" {
		return u, fmt.Errorf("%s has no host: write it as https://HOST/PATH", quoteShort(u.Raw))
	}
	if pu.User != nil {
		return u, fmt.Errorf("an http(s) URL with a user or password is not accepted: it would be stored and shown with the job; use a public URL or a datastore")
	}
	if m := blobHostRe.FindStringSubmatch(strings.ToLower(pu.Hostname())); m != nil && pu.Port() == "" {
		container, rest, _ := strings.Cut(strings.TrimPrefix(pu.Path, "/"), "/")
		if container == "" {
			return u, fmt.Errorf("%s names a storage account but no container: write https://%s/CONTAINER/PATH", quoteShort(u.Raw), pu.Host)
		}
		if pu.RawQuery != "" {
			// A SAS token: the query is what makes the URL readable.
			u.Kind, u.URL = HTTP, u.Raw
			return u, nil
		}
		return blob(u, m[1], container, strings.ToLower(pu.Host), rest)
	}
	u.Kind, u.URL = HTTP, pu.String()
	return u, nil
}

// parseContainerURI reads wasbs://CONTAINER@ACCOUNT.blob.core.windows.net/PATH
// and abfss://FILESYSTEM@ACCOUNT.dfs.core.windows.net/PATH.
func parseContainerURI(u URI) (URI, error) {
	scheme, rest, _ := strings.Cut(u.Raw, "://")
	form := scheme + "://CONTAINER@ACCOUNT.blob.core.windows.net/PATH"
	if rest == "" {
		return u, fmt.Errorf("%s: write it as %s", quoteShort(u.Raw), form)
	}
	authority, p, _ := strings.Cut(rest, "/")
	container, host, ok := strings.Cut(authority, "@")
	if !ok || container == "" || host == "" {
		return u, fmt.Errorf("%s: write it as %s", quoteShort(u.Raw), form)
	}
	m := blobHostRe.FindStringSubmatch(strings.ToLower(host))
	if m == nil {
		return u, fmt.Errorf("%s: %s is not a storage account's host: write it as %s", quoteShort(u.Raw), strconv.Quote(host), form)
	}
	// The path is written unescaped in these URIs; only %XX is decoded.
	if dp, err := url.PathUnescape(p); err == nil {
		p = dp
	}
	return blob(u, m[1], container, strings.ToLower(host), p)
}

func blob(u URI, account, container, host, p string) (URI, error) {
	if !containerRe.MatchString(container) {
		return u, fmt.Errorf("%s: %s is not a container name: 3 to 63 lower-case letters, digits and single '-'", quoteShort(u.Raw), strconv.Quote(container))
	}
	p, err := cleanPath(p)
	if err != nil {
		return u, fmt.Errorf("%s: %v", quoteShort(u.Raw), err)
	}
	u.Kind, u.Account, u.Container, u.Host, u.Path = Blob, account, container, host, p
	return u, nil
}

// parseAzureML reads azureml://datastores/NAME/paths/PATH (and Azure's
// long form with subscriptions/.../workspaces/... before datastores/).
func parseAzureML(u URI) (URI, error) {
	rest := strings.TrimPrefix(u.Raw, "azureml://")
	rest = datastoreLong.ReplaceAllString(rest, "datastores/")
	if !strings.HasPrefix(rest, "datastores/") {
		what := "this azureml:// path"
		switch {
		case strings.HasPrefix(rest, "registries/"):
			what = "a registry's asset"
		case strings.HasPrefix(rest, "jobs/"):
			what = "a job's output by URI"
		}
		return u, fmt.Errorf("%s: %s cannot be read here; use azureml://datastores/NAME/paths/PATH, azureml:NAME:VERSION, a URL or a local path", quoteShort(u.Raw), what)
	}
	rest = strings.TrimPrefix(rest, "datastores/")
	name, rest, _ := strings.Cut(rest, "/")
	if !datastoreRe.MatchString(name) {
		return u, fmt.Errorf("%s: %s is not a datastore name: letters, digits and '_'", quoteShort(u.Raw), strconv.Quote(name))
	}
	switch {
	case rest == "" || rest == "paths" || rest == "paths/":
		rest = ""
	case strings.HasPrefix(rest, "paths/"):
		rest = strings.TrimPrefix(rest, "paths/")
	default:
		return u, fmt.Errorf("%s: write it as azureml://datastores/%s/paths/PATH", quoteShort(u.Raw), name)
	}
	p, err := cleanPath(rest)
	if err != nil {
		return u, fmt.Errorf("%s: %v", quoteShort(u.Raw), err)
	}
	u.Kind, u.Store, u.Path = Datastore, name, p
	return u, nil
}

// cleanPath checks a path inside a container or datastore: relative,
// '/'-separated, no '.' or '..' steps (it must stay inside), no control
// characters. A trailing '/' is dropped.
func cleanPath(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return "", fmt.Errorf("the path %s has an empty step ('//')", strconv.Quote(p))
		case ".", "..":
			return "", fmt.Errorf("the path %s has a %q step; it must stay inside its container or datastore", strconv.Quote(p), seg)
		}
		for _, r := range seg {
			if r < 0x20 || r == 0x7f || r == '\\' {
				return "", fmt.Errorf("the path %s holds a control character or '\\'", strconv.Quote(p))
			}
		}
	}
	return p, nil
}

// BlobBase is the base URL of a storage account's blob service: the
// override for account in endpoints (tests, a private mirror) if there
// is one, else https://HOST with HOST the account's blob host.
func BlobBase(account, host string, endpoints map[string]string) string {
	if b, ok := endpoints[account]; ok {
		return strings.TrimRight(b, "/")
	}
	if host == "" {
		host = account + ".blob.core.windows.net"
	}
	// ADLS Gen2 accounts serve their files on the blob endpoint too,
	// where anonymous reads and List Blobs work.
	return "https://" + strings.Replace(host, ".dfs.", ".blob.", 1)
}

// EscapePath escapes each step of a '/'-separated path for a URL.
func EscapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ParseEndpoints reads a list of ACCOUNT=URL pairs separated by ',' (the
// form of $FERRY_BLOB_ENDPOINTS): the base URLs that stand in for storage
// accounts' blob services.
func ParseEndpoints(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		acct, base, ok := strings.Cut(kv, "=")
		if !ok || acct == "" {
			return nil, fmt.Errorf("blob endpoints: %s is not ACCOUNT=URL", strconv.Quote(kv))
		}
		pu, err := url.Parse(base)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("blob endpoints: %s: %s is not an http(s) URL", acct, strconv.Quote(base))
		}
		out[acct] = strings.TrimRight(base, "/")
	}
	return out, nil
}

func quoteShort(s string) string {
	const max = 120
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}
