package spec

// The paths that job inputs and data assets name (Azure ML v2 files): a
// local path, a registered asset (azureml:NAME:VERSION), an http(s) URL,
// an Azure blob container (wasbs://, https://ACCOUNT.blob..., abfss://) or
// a datastore path (azureml://datastores/NAME/paths/PATH). This only
// parses: the workspace resolves datastores and the runner fetches.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// URIKind is what a path names.
type URIKind int

// The kinds of path.
const (
	URILocal     URIKind = iota // a local file or folder (or file:PATH)
	URIAsset                    // a registered data asset: azureml:NAME:VERSION or azureml:NAME@latest
	URIHTTP                     // an http:// or https:// URL that is not a blob container's
	URIBlob                     // a file or folder of an Azure blob container
	URIDatastore                // a path in a datastore: azureml://datastores/NAME/paths/PATH
)

// DataURI is a parsed input path.
type DataURI struct {
	Kind URIKind
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
	uriSchemeRe = lazyRegexp(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// A blob host: ACCOUNT.blob.core.windows.net (or another cloud's
	// suffix); ADLS Gen2's dfs host serves the same account.
	blobHostRe     = lazyRegexp(`^([a-z0-9]{3,24})\.(blob|dfs)\.(core\.[a-z0-9.]+)$`)
	containerRe    = lazyRegexp(`^(\$root|\$web|[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62})$`)
	uriDatastoreRe = lazyRegexp(`^[A-Za-z0-9_-]{1,255}$`)
	datastoreLong  = lazyRegexp(`^subscriptions/[^/]+/resource[gG]roups/[^/]+/(?:providers/Microsoft\.MachineLearningServices/)?workspaces/[^/]+/datastores/`)
)

// IsRemotePath says whether p names something other than a local path: any
// scheme but file:.
func IsRemotePath(p string) bool {
	return uriSchemeRe().MatchString(p) && !strings.HasPrefix(p, "file:")
}

// ParseDataURI reads an input path. A local path (no scheme, or file:) and a data
// asset reference are returned as such without further checks (the spec
// checks references); every remote form is checked, and one Ferry cannot
// read is an error that says what it can.
func ParseDataURI(p string) (DataURI, error) {
	u := DataURI{Raw: p}
	switch {
	case !IsRemotePath(p):
		u.Kind = URILocal
		return u, nil
	case strings.HasPrefix(p, "azureml:") && !strings.HasPrefix(p, "azureml://"):
		u.Kind = URIAsset
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
	return u, fmt.Errorf("%s: %s:// paths cannot be read here; use an http(s) URL, wasbs://CONTAINER@ACCOUNT.blob.core.windows.net/PATH, azureml://datastores/NAME/paths/PATH, azureml:NAME:VERSION or a local path", quoteURI(p), scheme)
}

func parseHTTP(u DataURI) (DataURI, error) {
	pu, err := url.Parse(u.Raw)
	if err != nil {
		return u, fmt.Errorf("%s is not a URL: %v", quoteURI(u.Raw), err)
	}
	if pu.Host == "" {
		return u, fmt.Errorf("%s has no host: write it as https://HOST/PATH", quoteURI(u.Raw))
	}
	if pu.User != nil {
		return u, fmt.Errorf("an http(s) URL with a user or password is not accepted: it would be stored and shown with the job; use a public URL or a datastore")
	}
	if m := blobHostRe().FindStringSubmatch(strings.ToLower(pu.Hostname())); m != nil && pu.Port() == "" {
		container, rest, _ := strings.Cut(strings.TrimPrefix(pu.Path, "/"), "/")
		if container == "" {
			return u, fmt.Errorf("%s names a storage account but no container: write https://%s/CONTAINER/PATH", quoteURI(u.Raw), pu.Host)
		}
		if pu.RawQuery != "" {
			// A SAS token: the query is what makes the URL readable.
			u.Kind, u.URL = URIHTTP, u.Raw
			return u, nil
		}
		return blobURI(u, m[1], container, strings.ToLower(pu.Host), rest)
	}
	u.Kind, u.URL = URIHTTP, pu.String()
	return u, nil
}

// parseContainerURI reads wasbs://CONTAINER@ACCOUNT.blob.core.windows.net/PATH
// and abfss://FILESYSTEM@ACCOUNT.dfs.core.windows.net/PATH.
func parseContainerURI(u DataURI) (DataURI, error) {
	scheme, rest, _ := strings.Cut(u.Raw, "://")
	form := scheme + "://CONTAINER@ACCOUNT.blob.core.windows.net/PATH"
	if rest == "" {
		return u, fmt.Errorf("%s: write it as %s", quoteURI(u.Raw), form)
	}
	authority, p, _ := strings.Cut(rest, "/")
	container, host, ok := strings.Cut(authority, "@")
	if !ok || container == "" || host == "" {
		return u, fmt.Errorf("%s: write it as %s", quoteURI(u.Raw), form)
	}
	m := blobHostRe().FindStringSubmatch(strings.ToLower(host))
	if m == nil {
		return u, fmt.Errorf("%s: %s is not a storage account's host: write it as %s", quoteURI(u.Raw), strconv.Quote(host), form)
	}
	// The path is written unescaped in these URIs; only %XX is decoded.
	if dp, err := url.PathUnescape(p); err == nil {
		p = dp
	}
	return blobURI(u, m[1], container, strings.ToLower(host), p)
}

func blobURI(u DataURI, account, container, host, p string) (DataURI, error) {
	if !containerRe().MatchString(container) {
		return u, fmt.Errorf("%s: %s is not a container name: 3 to 63 lower-case letters, digits and single '-'", quoteURI(u.Raw), strconv.Quote(container))
	}
	p, err := cleanStorePath(p)
	if err != nil {
		return u, fmt.Errorf("%s: %v", quoteURI(u.Raw), err)
	}
	u.Kind, u.Account, u.Container, u.Host, u.Path = URIBlob, account, container, host, p
	return u, nil
}

// parseAzureML reads azureml://datastores/NAME/paths/PATH (and Azure's
// long form with subscriptions/.../workspaces/... before datastores/).
func parseAzureML(u DataURI) (DataURI, error) {
	rest := strings.TrimPrefix(u.Raw, "azureml://")
	rest = datastoreLong().ReplaceAllString(rest, "datastores/")
	if !strings.HasPrefix(rest, "datastores/") {
		what := "this azureml:// path"
		switch {
		case strings.HasPrefix(rest, "registries/"):
			what = "a registry's asset"
		case strings.HasPrefix(rest, "jobs/"):
			what = "a job's output by DataURI"
		}
		return u, fmt.Errorf("%s: %s cannot be read here; use azureml://datastores/NAME/paths/PATH, azureml:NAME:VERSION, a URL or a local path", quoteURI(u.Raw), what)
	}
	rest = strings.TrimPrefix(rest, "datastores/")
	name, rest, _ := strings.Cut(rest, "/")
	if !uriDatastoreRe().MatchString(name) {
		return u, fmt.Errorf("%s: %s is not a datastore name: letters, digits, '_' and '-'", quoteURI(u.Raw), strconv.Quote(name))
	}
	switch {
	case rest == "" || rest == "paths" || rest == "paths/":
		rest = ""
	case strings.HasPrefix(rest, "paths/"):
		rest = strings.TrimPrefix(rest, "paths/")
	default:
		return u, fmt.Errorf("%s: write it as azureml://datastores/%s/paths/PATH", quoteURI(u.Raw), name)
	}
	p, err := cleanStorePath(rest)
	if err != nil {
		return u, fmt.Errorf("%s: %v", quoteURI(u.Raw), err)
	}
	u.Kind, u.Store, u.Path = URIDatastore, name, p
	return u, nil
}

// cleanPath checks a path inside a container or datastore: relative,
// '/'-separated, no '.' or '..' steps (it must stay inside), no control
// characters. A trailing '/' is dropped.
func cleanStorePath(p string) (string, error) {
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

// EscapeURLPath escapes each step of a '/'-separated path for a URL.
func EscapeURLPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ParseBlobEndpoints reads a list of ACCOUNT=URL pairs separated by ',' (the
// form of $FERRY_BLOB_ENDPOINTS): the base URLs that stand in for storage
// accounts' blob services.
func ParseBlobEndpoints(s string) (map[string]string, error) {
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

func quoteURI(s string) string {
	const max = 120
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}
