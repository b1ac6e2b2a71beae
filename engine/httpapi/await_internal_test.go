package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestInferRouteIsTheMuxs: for every path, inferRoute picks the pattern
// the mux would, and pathValue then gives the path values the mux would,
// or inferRoute leaves the path to the mux.
func TestInferRouteIsTheMuxs(t *testing.T) {
	h, err := New(nullDoor{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// A mux of the three patterns alone says what values it would give.
	values := http.NewServeMux()
	var gotModel, gotVersion string
	for _, p := range []string{v1InferPattern, v2InferPattern, v2VersionInferPattern} {
		values.HandleFunc(p, func(_ http.ResponseWriter, r *http.Request) {
			gotModel, gotVersion = r.PathValue("model"), r.PathValue("version")
		})
	}
	for _, path := range []string{
		"/v1/models/m/infer", "/v1/models/versions/infer", "/v1/models/m/infer/", "/v1/models//infer",
		"/v1/models/m/batch", "/v1/models/m/x/infer", "/v2/models/m/infer", "/v2/models/m/infer/",
		"/v2/models/m/versions/v1/infer", "/v2/models/m/versions//infer", "/v2/models/versions/infer",
		"/v2/models/m/versions/v1/infer/", "/v2/models/m/versions/v1", "/v2/models/m", "/v2/models/m/ready",
		"/v2/models/m/x/v1/infer", "/v2/models/a%2Fb/infer", "/v3/models/m/infer", "/",
	} {
		r := httptest.NewRequest("POST", path, nil)
		_, muxPattern := h.mux.Handler(r)
		mine := h.inferRoute(r)
		inferMux := muxPattern == v1InferPattern || muxPattern == v2InferPattern || muxPattern == v2VersionInferPattern
		if mine != nil && !inferMux || mine == nil && inferMux && r.URL.RawPath == "" {
			t.Errorf("%s: inferRoute %v, the mux %q", path, mine != nil, muxPattern)
			continue
		}
		if mine == nil {
			continue
		}
		if r.Pattern != muxPattern {
			t.Errorf("%s: pattern %q, the mux's %q", path, r.Pattern, muxPattern)
		}
		gotModel, gotVersion = "", ""
		values.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, nil))
		if m, v := pathValue(r, "model"), pathValue(r, "version"); m != gotModel || v != gotVersion {
			t.Errorf("%s: model %q version %q, the mux's %q %q", path, m, v, gotModel, gotVersion)
		}
	}
}
