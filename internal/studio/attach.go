package studio

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/compute/virtualmachine"
	"github.com/ferry-ml/ferry/internal/spec"
)

// attachForm is the attach-a-machine form. Its secrets (password, key,
// passphrase) are read from the request and never written back into a
// page: a form shown again asks for them again.
type attachForm struct {
	Name, Address, Port, User, HostKey string
	// Offered is the fingerprint the machine offered when the form came
	// without a host key: the page asks the user to compare it with the
	// machine's own and confirm.
	Offered string
	Errors  map[string]string
	Problem string
}

// attachFields are the form's fields as the API names them in errors.
var attachFields = map[string]string{
	"name": "name", "address": "address", "host_key": "host_key",
	"ssh_settings.admin_username": "admin_username", "ssh_settings.ssh_port": "ssh_port",
	"ssh_settings.admin_password": "secret", "ssh_settings.ssh_private_key_file": "secret",
	"ssh_settings.ssh_private_key": "secret", "ssh_settings.ssh_private_key_passphrase": "secret",
}

// offeredRE finds the fingerprint in the API's answer to an attach without
// a host key ("host_key: is required: the machine at H offers SHA256:...").
var offeredRE = regexp.MustCompile(`offers ((?:ssh-[a-z0-9-]+ |ecdsa-[a-z0-9-]+ )?SHA256:[A-Za-z0-9+/=]+)`)

func (s *Studio) attachNew(w http.ResponseWriter, r *http.Request, ss *session) error {
	s.render(w, r, ss, "attach", "Attach a machine", attachForm{Port: "22", Errors: map[string]string{}})
	return nil
}

// attachCreate sends a virtualmachine compute to the API. Without a host
// key the API logs in, learns the key the machine offers, and refuses,
// naming it: the page shows that fingerprint to be checked on the machine
// and confirmed, which sends the form again pinning it.
func (s *Studio) attachCreate(w http.ResponseWriter, r *http.Request, ss *session) error {
	p := r.PostForm
	f := attachForm{Name: strings.TrimSpace(p.Get("name")), Address: strings.TrimSpace(p.Get("address")), Port: strings.TrimSpace(p.Get("ssh_port")),
		User: strings.TrimSpace(p.Get("admin_username")), HostKey: strings.TrimSpace(p.Get("host_key")), Errors: map[string]string{}}
	c := &spec.Compute{Name: f.Name, Type: virtualmachine.Type, Address: f.Address, HostKey: f.HostKey,
		SSHSettings: &spec.SSHSettings{AdminUsername: f.User, AdminPassword: p.Get("admin_password"),
			SSHPrivateKey: privateKeyOf(r, f.Errors), SSHPrivateKeyPassphrase: p.Get("ssh_private_key_passphrase")}}
	if f.Port != "" {
		n, err := strconv.Atoi(f.Port)
		if err != nil {
			f.Errors["ssh_port"] = fmt.Sprintf("%q is not a port number; enter one such as 22", f.Port)
		}
		c.SSHSettings.SSHPort = n
	}
	if c.SSHSettings.AdminPassword == "" && c.SSHSettings.SSHPrivateKey == "" && f.Errors["ssh_private_key_file"] == "" {
		f.Errors["secret"] = "give the password or the private key Ferry logs in with"
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
		if m := offeredRE.FindStringSubmatch(err.Error()); m != nil && f.HostKey == "" {
			f.Offered = strings.TrimSpace(m[1][strings.Index(m[1], "SHA256:"):])
		} else {
			placeAttachErrors(&f, err)
		}
	}
	s.render(withStatus(w, http.StatusUnprocessableEntity), r, ss, "attach", "Attach a machine", f)
	return nil
}

// maxKeyFile is the largest private key file the attach forms take; an
// OpenSSH key, even RSA 16384, is a few KiB.
const maxKeyFile = 64 << 10

// privateKeyOf is the private key the form gives, pasted into
// ssh_private_key or chosen as the file ssh_private_key_file, trimmed
// and ending in one line break, or "" when neither is given. Both given,
// a file over maxKeyFile, or one that is empty or not text is refused
// in errs["ssh_private_key_file"].
func privateKeyOf(r *http.Request, errs map[string]string) string {
	pasted := strings.TrimSpace(r.PostForm.Get("ssh_private_key"))
	var file string
	if r.MultipartForm != nil && len(r.MultipartForm.File["ssh_private_key_file"]) > 0 {
		fh := r.MultipartForm.File["ssh_private_key_file"][0]
		switch {
		case fh.Filename == "" && fh.Size == 0: // no file chosen
		case fh.Size > maxKeyFile:
			errs["ssh_private_key_file"] = fmt.Sprintf("%s is %d bytes; a private key file is at most %d KiB: choose the key itself (such as ~/.ssh/id_ed25519), not the .pub or another file", fh.Filename, fh.Size, maxKeyFile>>10)
			return ""
		default:
			b, err := readFileHeader(fh, maxKeyFile)
			if err != nil {
				errs["ssh_private_key_file"] = fmt.Sprintf("%s could not be read: %v; choose it again", fh.Filename, err)
				return ""
			}
			file = strings.TrimSpace(string(b))
			if file == "" || !utf8.ValidString(file) || strings.ContainsRune(file, 0) {
				errs["ssh_private_key_file"] = fmt.Sprintf("%s is empty or not text; choose an OpenSSH or PEM private key file (such as ~/.ssh/id_ed25519)", fh.Filename)
				return ""
			}
		}
	}
	if pasted != "" && file != "" {
		errs["ssh_private_key_file"] = "give the private key once: paste its text or choose its file, not both"
		return ""
	}
	if key := pasted + file; key != "" {
		return key + "\n"
	}
	return ""
}

// readFileHeader reads an uploaded file, at most limit+1 bytes of it.
func readFileHeader(fh *multipart.FileHeader, limit int64) ([]byte, error) {
	f, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

func placeAttachErrors(f *attachForm, err error) {
	f.Problem = placeFieldErrors(f.Errors, attachFields, err)
}

// placeFieldErrors puts the API's refusal beside the form's fields: each
// error whose field fields maps (the API's name to the form's) goes into
// errs under the form's name; what no field takes is returned, to be
// shown above the form. A field the map lacks is looked up again without
// its last parts ("job_tier_qos.spot" as "job_tier_qos",
// "instance_types.a.resources.limits" as "instance_types").
func placeFieldErrors(errs, fields map[string]string, err error) string {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return err.Error()
	}
	var rest []string
	put := func(field, msg string) bool {
		id, ok := fields[field]
		for f := field; !ok; {
			i := strings.LastIndexByte(f, '.')
			if i <= 0 {
				break
			}
			f = f[:i]
			id, ok = fields[f]
		}
		if !ok {
			return false
		}
		if errs[id] != "" {
			errs[id] += "; "
		}
		errs[id] += msg
		return true
	}
	for _, fe := range ae.Errors {
		if !put(fe.Field, fe.Message) {
			rest = append(rest, fe.Error())
		}
	}
	if len(ae.Errors) == 0 {
		field, msg, ok := strings.Cut(ae.Detail, ": ")
		if !ok || !put(field, msg) {
			rest = append(rest, ae.Detail)
		}
	}
	return strings.Join(rest, "\n")
}
