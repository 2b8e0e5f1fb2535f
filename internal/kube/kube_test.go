package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// The client against the test cluster: what the two packages using it
// rely on beyond their own tests: errors decode to API statuses, list and
// delete take label selectors, and an informer sees only its selector's
// objects, through a Lister.
func TestAgainstTheTestCluster(t *testing.T) {
	raw, err := os.ReadFile(testutil.Kube(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if v, err := cs.ServerVersion(ctx); err != nil || v.GitVersion == "" {
		t.Fatalf("ServerVersion = %+v, %v", v, err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "ferry-kube-" + hex.EncodeToString(b)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})

	cms := cs.CoreV1().ConfigMaps(ns)
	if _, err := cms.Get(ctx, "none", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a missing ConfigMap: %v, want a NotFound status", err)
	}
	inf := cms.Informer("app=ours")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(stop) }()
	defer func() { close(stop); <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	ours := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ours", Labels: map[string]string{"app": "ours"}}, Data: map[string]string{"v": "1"}}
	made, err := cms.Create(ctx, ours, metav1.CreateOptions{})
	if err != nil || made.UID == "" {
		t.Fatalf("Create = %+v, %v", made, err)
	}
	if _, err := cms.Create(ctx, ours, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second Create: %v, want AlreadyExists", err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	made.Data["v"] = "2"
	if _, err := cms.Update(ctx, made, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	lister := NewLister[*corev1.ConfigMap](inf)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, ok := lister.Get(ns, "ours"); ok && got.Data["v"] == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never saw the update of ConfigMap ours")
		}
	}
	if _, ok := lister.Get(ns, "other"); ok {
		t.Error("the informer holds ConfigMap other, which its selector leaves out")
	}
	if got := lister.List(ns, labels.Everything()); len(got) != 1 {
		t.Errorf("Lister.List = %d objects, want 1", len(got))
	}

	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=ours"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "ours" {
		t.Fatalf("List by label = %+v, %v", list, err)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=ours"}); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	if _, err := cms.Get(ctx, "ours", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap ours after DeleteCollection: %v, want NotFound", err)
	}
	if _, err := cms.Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap other after DeleteCollection of app=ours: %v", err)
	}

	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "configmaps"}},
	}, metav1.CreateOptions{})
	if err != nil || !r.Status.Allowed {
		t.Errorf("SelfSubjectAccessReview of the admin's create configmaps = %+v, %v; want allowed", r, err)
	}
}
