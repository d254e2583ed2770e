package predictapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestLoadInstances(t *testing.T) {
	for name, c := range map[string]struct {
		in   string
		n    int
		fail string
	}{
		"lines":     {in: "{\"a\":1}\n\n{\"a\":2}\n", n: 2},
		"array":     {in: `[{"a":1},{"a":2},{"a":3}]`, n: 3},
		"wrapped":   {in: `{"instances":[{"a":1}]}`, n: 1},
		"one":       {in: `{"a":1}`, n: 1},
		"empty":     {in: " \n", fail: "no instances"},
		"bad line":  {in: "{\"a\":1}\n{\"a\":", fail: "line 2 is not JSON"},
		"bad array": {in: `[{"a":1},`, fail: "unexpected end"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := LoadInstances([]byte(c.in))
			if c.fail != "" {
				if err == nil || !strings.Contains(err.Error(), c.fail) {
					t.Fatalf("error %v, want one containing %q", err, c.fail)
				}
				return
			}
			if err != nil || len(got) != c.n {
				t.Fatalf("%d instances, error %v; want %d", len(got), err, c.n)
			}
		})
	}
}

// TestClient talks to a server that answers like the prediction server:
// the request reaches the versioned route, the answer is decoded, a 404's
// {"error"} becomes an ErrNotFound error carrying the server's message.
func TestClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/models/census/versions/3:predict":
			var req struct{ Instances []json.RawMessage }
			b, _ := io.ReadAll(r.Body)
			if json.Unmarshal(b, &req) != nil || len(req.Instances) != 2 || r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
				return
			}
			io.WriteString(w, `{"predictions":[{"class":">50K"},{"class":"<=50K"}]}`)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			io.WriteString(w, `{"models":[{"name":"census","versions":[1,3],"default":3}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"model \"nope\" not found"}`)
		}
	}))
	defer srv.Close()
	c := Client{BaseURL: srv.URL + "/"}
	ctx := context.Background()
	preds, err := c.Predict(ctx, "census", 3, []json.RawMessage{json.RawMessage(`{"age":39}`), json.RawMessage(`{"age":50}`)})
	if err != nil || len(preds) != 2 || preds[0]["class"] != ">50K" {
		t.Fatalf("Predict: %v, %v; want 2 predictions, the first >50K", preds, err)
	}
	models, err := c.Models(ctx)
	if err != nil || len(models) != 1 || models[0].Name != "census" || models[0].Default != 3 || len(models[0].Versions) != 2 {
		t.Fatalf("Models: %+v, %v", models, err)
	}
	_, err = c.Metadata(ctx, "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `404 Not Found: model "nope" not found`) {
		t.Fatalf("Metadata of a missing model: %v, want ErrNotFound with the server's message", err)
	}
}

// TestClientToken checks that a client with a Token sends it as a bearer
// token on every call, and one without sends no Authorization header.
func TestClientToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		io.WriteString(w, `{"models":[],"predictions":[]}`)
	}))
	defer srv.Close()
	ctx := context.Background()
	c := Client{BaseURL: srv.URL, Token: "0123456789abcdef"}
	c.Models(ctx)
	c.Predict(ctx, "census", 0, []json.RawMessage{json.RawMessage(`{}`)})
	c.Metadata(ctx, "census")
	Client{BaseURL: srv.URL}.Models(ctx)
	want := []string{"Bearer 0123456789abcdef", "Bearer 0123456789abcdef", "Bearer 0123456789abcdef", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("Authorization headers %q, want %q", got, want)
	}
}
