package devserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
)

// WorkerSubject is the subject of a caller that presented a worker token.
const WorkerSubject = "trainflow-worker"

// workerOnly are the frontend APIs only workers may call: polling task
// queues, answering workflow, activity, query and Nexus tasks (the …ById
// forms included) and heartbeating. Anyone else who called them could run
// or complete a job's steps with results of its choosing.
var workerOnly = map[string]bool{}

func init() {
	for _, m := range []string{
		"PollWorkflowTaskQueue", "PollActivityTaskQueue", "PollNexusTaskQueue",
		"RespondWorkflowTaskCompleted", "RespondWorkflowTaskFailed", "RespondQueryTaskCompleted",
		"RespondActivityTaskCompleted", "RespondActivityTaskCompletedById",
		"RespondActivityTaskFailed", "RespondActivityTaskFailedById",
		"RespondActivityTaskCanceled", "RespondActivityTaskCanceledById",
		"RecordActivityTaskHeartbeat", "RecordActivityTaskHeartbeatById",
		"RespondNexusTaskCompleted", "RespondNexusTaskFailed",
		"ShutdownWorker", "RecordWorkerHeartbeat",
		"UpdateWorkerBuildIdCompatibility", "UpdateWorkerVersioningRules",
	} {
		workerOnly["/temporal.api.workflowservice.v1.WorkflowService/"+m] = true
	}
}

// operatorRead are the OperatorService APIs users may call (the UI and the
// Temporal CLI list search attributes); the rest of OperatorService and
// all of AdminService (importing histories, adding tasks, deleting
// namespaces…) are the operator's, i.e. a worker token's.
func operatorRead(api string) bool {
	m, ok := strings.CutPrefix(api, "/temporal.api.operatorservice.v1.OperatorService/")
	return ok && (strings.HasPrefix(m, "List") || strings.HasPrefix(m, "Get") || strings.HasPrefix(m, "Describe"))
}

// Principal types the server stamps on the history events a caller's
// request made (frontend.enablePrincipalPropagation): who started a
// workflow, sent a signal, completed an activity.
const (
	PrincipalWorker = "trainflow-worker"
	PrincipalUser   = "trainflow-user"
)

// UIPrincipal is the user name of the Web UI Start runs: the UI's server
// presents a token made in memory for this run, so a browser on the UI's
// port acts as this user.
const UIPrincipal = "temporal-ui"

// tokenMapper maps a bearer token among the worker tokens to the worker
// subject, one among the user tokens to that user, anything else
// (another token, none) to an anonymous caller, who may only ask for
// health.
type tokenMapper struct {
	workers []string
	users   map[string]string // token → user name
}

func (m tokenMapper) GetClaims(ai *authorization.AuthInfo) (*authorization.Claims, error) {
	tok, _ := strings.CutPrefix(ai.AuthToken, "Bearer ")
	if tok == "" {
		return &authorization.Claims{}, nil
	}
	for _, w := range m.workers {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(w)) == 1 {
			return &authorization.Claims{Subject: WorkerSubject, System: authorization.RoleAdmin}, nil
		}
	}
	// Every token is compared, so the time taken says nothing of which
	// one (nearly) matched.
	name := ""
	for u, n := range m.users {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(u)) == 1 {
			name = n
		}
	}
	if name != "" {
		return &authorization.Claims{Subject: name, System: authorization.RoleWriter}, nil
	}
	return &authorization.Claims{}, nil
}

// AuthInfoRequired is false: a caller without a token is mapped too (to
// an anonymous caller, refused all but health).
func (tokenMapper) AuthInfoRequired() bool { return false }

// roleAuthorizer lets workers (and the server's own system worker) call
// everything; users every API but the workers' and the operator's; and
// anonymous callers the health checks only.
type roleAuthorizer struct{}

func (roleAuthorizer) Authorize(_ context.Context, c *authorization.Claims, t *authorization.CallTarget) (authorization.Result, error) {
	if authorization.IsHealthCheckAPI(t.APIName) {
		return authorization.Result{Decision: authorization.DecisionAllow}, nil
	}
	// Workers' tokens map to the system admin role, and so does the
	// internal frontend every caller of which holds this run's internode
	// certificate (the system worker).
	if c != nil && c.System&authorization.RoleAdmin != 0 {
		p := &commonpb.Principal{Type: PrincipalWorker, Name: c.Subject}
		if c.Subject == "" {
			p = nil // the server's own services
		}
		return authorization.Result{Decision: authorization.DecisionAllow, Principal: p}, nil
	}
	if c == nil || c.Subject == "" {
		return authorization.Result{Decision: authorization.DecisionDeny,
			Reason: "unauthenticated: present a user token (an API key: trainflow commands send HOME/keys/temporal-user.token of the stack's home; the Temporal CLI takes --api-key TOKEN --tls=false) — docs/security.md"}, nil
	}
	switch {
	case workerOnly[t.APIName]:
		return authorization.Result{Decision: authorization.DecisionDeny,
			Reason: "only trainflow workers (the operator's worker token) may poll task queues or answer tasks"}, nil
	case strings.HasPrefix(t.APIName, "/temporal.server.api.adminservice.v1.AdminService/"),
		strings.HasPrefix(t.APIName, "/temporal.api.operatorservice.v1.OperatorService/") && !operatorRead(t.APIName):
		return authorization.Result{Decision: authorization.DecisionDeny,
			Reason: "admin and operator APIs take the operator's worker token"}, nil
	}
	return authorization.Result{Decision: authorization.DecisionAllow, Principal: &commonpb.Principal{Type: PrincipalUser, Name: c.Subject}}, nil
}

// internodeTLS returns TLS settings that make the services' own ports
// (history, matching, worker, internal frontend) answer only callers
// holding a certificate made for this process's run: a fresh CA and key,
// in memory, never written. The public frontend stays as configured.
func internodeTLS() (config.GroupTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.GroupTLS{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trainflow dev internode CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return config.GroupTLS{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return config.GroupTLS{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.GroupTLS{}, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: internodeName},
		DNSNames: []string{internodeName}, IPAddresses: []net.IP{net.ParseIP(loopback)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return config.GroupTLS{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("internode key: %w", err)
	}
	b64 := func(typ string, der []byte) string {
		return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	caData := b64("CERTIFICATE", caDER)
	return config.GroupTLS{
		Server: config.ServerTLS{CertData: b64("CERTIFICATE", leafDER), KeyData: b64("EC PRIVATE KEY", keyDER),
			ClientCAData: []string{caData}, RequireClientAuth: true},
		Client: config.ClientTLS{ServerName: internodeName, RootCAData: []string{caData}},
	}, nil
}

const internodeName = "trainflow-internode"

// minToken is the shortest user token Start takes.
const minToken = 16
