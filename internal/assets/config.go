package assets

import (
	"time"

	"github.com/ferry-ml/ferry/internal/envcatalog"
)

// Config is what New needs: the store, the clock and where the built-in
// and curated things are. The workspace fills it from its own Config.
type Config struct {
	Store               Store
	Now                 func() time.Time    // clock; must not be nil
	Environments        *envcatalog.Catalog // curated environments, after the registered ones
	DefaultDatastoreDir string              // the built-in workspaceblobstore's folder; "" for none
	BlobEndpoints       map[string]string   // storage accounts' stand-in blob services
}
