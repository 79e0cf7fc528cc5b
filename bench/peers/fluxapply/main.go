// Command fluxapply applies a file of Kubernetes manifests the way Flux's kustomize-controller
// does: fluxcd/pkg/ssa's ResourceManager.ApplyAllStaged with field manager "kustomize-controller",
// the controller's owner labels, apply options and cleanup list, an uncached controller-runtime
// client at the controller's default QPS/burst (50/300) and its default SSA concurrency (4).
//
// It counts every HTTP request it sends by method and status and prints one JSON object:
//
//	{"seconds": 12.3, "objects": 2600, "requests": {"PATCH 201": ...}, "requestsTotal": 7802,
//	 "writes": 2600, "changes": {"created": 2600}}
//
// Writes are PATCH/POST/PUT/DELETE requests that were not server-side dry-runs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const (
	controllerName = "kustomize-controller"
	ownerGroup     = "kustomize.toolkit.fluxcd.io"
)

// counter is an http.RoundTripper that counts requests by "METHOD STATUS".
type counter struct {
	next   http.RoundTripper
	mu     sync.Mutex
	counts map[string]int
	writes int
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	key := req.Method + " error"
	if err == nil {
		key = fmt.Sprintf("%s %d", req.Method, resp.StatusCode)
	}
	dry := strings.Contains(req.URL.RawQuery, "dryRun=")
	if dry {
		key += " dry-run"
	}
	c.mu.Lock()
	c.counts[key]++
	if !dry && req.Method != http.MethodGet && req.Method != http.MethodHead {
		c.writes++
	}
	c.mu.Unlock()
	return resp, err
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	file := flag.String("f", "", "multi-document YAML file of the objects to apply")
	name := flag.String("name", "bench", "name of the Kustomization the owner labels point to")
	namespace := flag.String("namespace", "flux-system", "namespace of that Kustomization")
	concurrency := flag.Int("concurrent-ssa", 4, "kustomize-controller's --concurrent-ssa")
	qps := flag.Float64("kube-api-qps", 50, "client QPS (Flux controllers' default)")
	burst := flag.Int("kube-api-burst", 300, "client burst (Flux controllers' default)")
	flag.Parse()
	if err := run(*kubeconfig, *file, *name, *namespace, *concurrency, float32(*qps), *burst); err != nil {
		fmt.Fprintln(os.Stderr, "fluxapply:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, file, name, namespace string, concurrency int, qps float32, burst int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = controllerName
	count := &counter{counts: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { count.next = rt; return count })

	f, err := os.Open(file)
	if err != nil {
		return err
	}
	objects, err := utils.ReadObjects(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}

	start := time.Now()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return err
	}
	poller := polling.NewStatusPoller(kube, mapper, polling.Options{})
	manager := ssa.NewResourceManager(kube, poller, ssa.Owner{Field: controllerName, Group: ownerGroup})
	manager.SetConcurrency(concurrency)
	manager.SetOwnerLabels(objects, name, namespace)

	opts := ssa.DefaultApplyOptions()
	opts.ExclusionSelector = map[string]string{ownerGroup + "/reconcile": "disabled", ownerGroup + "/ssa": "Ignore"}
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: controllerName, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{ownerGroup + "/ssa": "Merge"},
	}
	changeSet, err := manager.ApplyAllStaged(context.Background(), objects, opts)
	seconds := time.Since(start).Seconds()
	if err != nil {
		return err
	}
	changes := map[string]int{}
	for _, entry := range changeSet.Entries {
		changes[string(entry.Action)]++
	}
	total := 0
	for _, n := range count.counts {
		total += n
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"seconds": seconds, "objects": len(objects), "requests": count.counts, "requestsTotal": total,
		"writes": count.writes, "changes": changes,
	})
}
