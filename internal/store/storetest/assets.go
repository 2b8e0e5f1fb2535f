package storetest

import (
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunAssets runs the suite of store.Assets: environments, models, data assets
// and components. open is as for Run.
func RunAssets[S store.Assets](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Assets { return open(t) }, []test[store.Assets]{
		{"Environment/CreateGet", testEnvironmentCreateGet},
		{"Environment/Conflict", testEnvironmentConflict},
		{"Environment/NotFound", testEnvironmentNotFound},
		{"Environment/ListOrder", testEnvironmentListOrder},

		{"Model/CreateGet", testModelCreateGet},
		{"Model/Conflict", testModelConflict},
		{"Model/NotFound", testModelNotFound},
		{"Model/ListOrder", testModelListOrder},
		{"Model/Archive", testModelArchive},

		{"Data/CreateGet", testDataCreateGet},
		{"Data/ConflictNotFound", testDataConflictNotFound},
		{"Data/ListArchive", testDataListArchive},

		{"Component/CreateGetList", testComponentCreateGetList},
	})
}
