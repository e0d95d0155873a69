package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"modelplane/busapi"
)

// Authority is the NATS trust chain modelplane runs on (decentralised JWT
// authentication): an operator, its system account, and the one account
// every modelplane process lives in. The account's key signs each
// process's user JWT, whose claims carry that user's subject permissions,
// so that the control plane can mint a node's credential without touching
// the server's configuration, and revoke it by re-issuing the account JWT
// with the user listed as revoked (docs/decisions.md, "NATS credentials").
//
// It holds private keys: it prints as <secret>.
type Authority struct {
	operator, system, account nkeys.KeyPair

	mu sync.Mutex
	// accountClaims is the account as last signed; revocations change it.
	accountClaims *jwt.AccountClaims
	operatorJWT   string
	systemJWT     string
	accountJWT    string
}

// AccountName is the name of the account every modelplane process uses.
const AccountName = "modelplane"

// NewAuthority creates a new operator, system account and account.
func NewAuthority() (*Authority, error) {
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, err
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	return newAuthority(op, sys, acc)
}

// authorityFile is how LoadOrCreateAuthority stores the three seeds.
type authorityFile struct {
	Operator string `json:"operator_seed"`
	System   string `json:"system_account_seed"`
	Account  string `json:"account_seed"`
}

// LoadOrCreateAuthority reads the authority kept in path, or creates one and
// stores it there (mode 0600), so that a restarted `modelplane dev` keeps its
// account, and with it the JetStream data stored under the account's key.
func LoadOrCreateAuthority(path string) (*Authority, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		a, err := NewAuthority()
		if err != nil {
			return nil, err
		}
		return a, a.save(path)
	}
	if err != nil {
		return nil, err
	}
	var f authorityFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("nats authority %s: %w", path, err)
	}
	var kps [3]nkeys.KeyPair
	for i, s := range []string{f.Operator, f.System, f.Account} {
		if kps[i], err = nkeys.FromSeed([]byte(s)); err != nil {
			return nil, fmt.Errorf("nats authority %s: %w", path, err)
		}
	}
	return newAuthority(kps[0], kps[1], kps[2])
}

func (a *Authority) save(path string) error {
	var f authorityFile
	for _, p := range []struct {
		kp  nkeys.KeyPair
		dst *string
	}{{a.operator, &f.Operator}, {a.system, &f.System}, {a.account, &f.Account}} {
		s, err := p.kp.Seed()
		if err != nil {
			return err
		}
		*p.dst = string(s)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return WritePrivateFile(path, b)
}

// writeFile0600 writes b to path readable only by its owner, replacing what
// was there without a moment in which another user could read it.
func WritePrivateFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func newAuthority(op, sys, acc nkeys.KeyPair) (*Authority, error) {
	a := &Authority{operator: op, system: sys, account: acc}
	opPub, _ := op.PublicKey()
	sysPub, _ := sys.PublicKey()
	accPub, _ := acc.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "modelplane"
	oc.SystemAccount = sysPub
	var err error
	if a.operatorJWT, err = oc.Encode(op); err != nil {
		return nil, fmt.Errorf("operator jwt: %w", err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	if a.systemJWT, err = sc.Encode(op); err != nil {
		return nil, fmt.Errorf("system account jwt: %w", err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = AccountName
	// JetStream is off for an account whose JWT sets no limits; these
	// bound what any credential of the account can make it hold.
	ac.Limits.JetStreamLimits = jetStreamLimits(AccountDiskBytes(busapi.Buckets, busapi.Streams))
	a.accountClaims = ac
	if a.accountJWT, err = ac.Encode(op); err != nil {
		return nil, fmt.Errorf("account jwt: %w", err)
	}
	return a, nil
}

// jetStreamLimits are the account's limits with disk bytes of storage.
func jetStreamLimits(disk int64) jwt.JetStreamLimits {
	return jwt.JetStreamLimits{MemoryStorage: AccountMaxMemoryBytes, DiskStorage: disk,
		Streams: AccountMaxStreams, Consumer: AccountMaxConsumers}
}

// String keeps the keys out of prints.
func (a *Authority) String() string { return "<secret>" }

// LogValue keeps the keys out of structured logs.
func (a *Authority) LogValue() slog.Value { return slog.StringValue("<secret>") }

// OperatorJWT, SystemAccountJWT and AccountJWT are the public JWTs a NATS
// server trusts (operator) and resolves (accounts): what the production
// server configuration lists (docs/security.md).
func (a *Authority) OperatorJWT() string { return a.operatorJWT }

// SystemAccountJWT is the system account's JWT.
func (a *Authority) SystemAccountJWT() string { return a.systemJWT }

// AccountJWT is the modelplane account's JWT, with its revocations.
func (a *Authority) AccountJWT() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accountJWT
}

// AccountPublicKey is the modelplane account's public key.
func (a *Authority) AccountPublicKey() string {
	pub, _ := a.account.PublicKey()
	return pub
}

// SystemAccountPublicKey is the system account's public key.
func (a *Authority) SystemAccountPublicKey() string {
	pub, _ := a.system.PublicKey()
	return pub
}

// Configure makes o a server that trusts this authority: operator mode,
// with both accounts resolved from memory. Every client must then present a
// user JWT signed by the account; a client without one is refused.
func (a *Authority) Configure(o *server.Options) error {
	oc, err := jwt.DecodeOperatorClaims(a.operatorJWT)
	if err != nil {
		return err
	}
	res := &server.MemAccResolver{}
	if err := res.Store(a.SystemAccountPublicKey(), a.systemJWT); err != nil {
		return err
	}
	if err := res.Store(a.AccountPublicKey(), a.AccountJWT()); err != nil {
		return err
	}
	o.TrustedOperators = []*jwt.OperatorClaims{oc}
	o.SystemAccount = a.SystemAccountPublicKey()
	o.AccountResolver = res
	return nil
}

// ControlPlane mints the control plane's credential.
func (a *Authority) ControlPlane() (Credential, error) {
	return a.Mint("control-plane", ControlPlanePermissions(), time.Time{})
}

// Gateway mints the credential of the gateway called name.
func (a *Authority) Gateway(name string) (Credential, error) {
	return a.Mint("gateway-"+name, GatewayPermissions(name), time.Time{})
}

// Agent mints the credential of node's agent.
func (a *Authority) Agent(node string) (Credential, error) {
	return a.Mint("node-"+node, AgentPermissions(node), time.Time{})
}

// Mint signs a new user with its own key pair and permissions p; a zero
// expires never expires (revocation ends it).
func (a *Authority) Mint(name string, p Permissions, expires time.Time) (Credential, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, err
	}
	pub, _ := kp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.Pub.Allow.Add(p.Publish...)
	uc.Sub.Allow.Add(p.Subscribe...)
	if p.Respond {
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	token, err := uc.Encode(a.account)
	if err != nil {
		return Credential{}, fmt.Errorf("user jwt %s: %w", name, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, err
	}
	return Credential{jwt: token, seed: seed, inbox: p.Inbox}, nil
}

// Credential is one NATS user: its JWT and private seed, and the inbox
// prefix its permissions allow. It prints as <secret>.
type Credential struct {
	jwt   string
	seed  []byte
	inbox string
}

// String keeps the seed out of prints.
func (c Credential) String() string { return "<secret>" }

// LogValue keeps the seed out of structured logs.
func (c Credential) LogValue() slog.Value { return slog.StringValue("<secret>") }

// PublicKey is the user's public key, what a revocation names.
func (c Credential) PublicKey() string {
	uc, err := jwt.DecodeUserClaims(c.jwt)
	if err != nil {
		return ""
	}
	return uc.Subject
}

// Inbox is the inbox prefix the credential connects with: the one its
// permissions allow (empty for the default).
func (c Credential) Inbox() string { return c.inbox }

// Options are the connection options that authenticate as this user and
// take replies under its inbox.
func (c Credential) Options() []nats.Option {
	jwtStr, seed := c.jwt, string(c.seed)
	opts := []nats.Option{nats.UserJWTAndSeed(jwtStr, seed)}
	if c.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inbox))
	}
	return opts
}

// File is the credential in the NATS creds file format (what
// `--nats-creds` reads).
func (c Credential) File() ([]byte, error) { return jwt.FormatUserConfig(c.jwt, c.seed) }

// WriteFile stores the credential at path, readable only by its owner.
func (c Credential) WriteFile(path string) error {
	b, err := c.File()
	if err != nil {
		return err
	}
	return WritePrivateFile(path, b)
}

// ParseCredential reads a creds file's contents.
func ParseCredential(b []byte) (Credential, error) {
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return Credential{}, fmt.Errorf("nats creds: %w", err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return Credential{}, fmt.Errorf("nats creds: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, fmt.Errorf("nats creds: %w", err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return Credential{}, fmt.Errorf("nats creds: %w", err)
	}
	return Credential{jwt: token, seed: seed, inbox: inboxOf(uc)}, nil
}

// inboxOf is the inbox prefix a user's subscribe permissions allow: the one
// allowed subject of the form _INBOX….>, or the default when the user may
// subscribe anywhere.
func inboxOf(uc *jwt.UserClaims) string {
	if len(uc.Sub.Allow) == 0 {
		return ""
	}
	for _, s := range uc.Sub.Allow {
		if p, ok := strings.CutSuffix(s, ".>"); ok && strings.HasPrefix(p, "_INBOX") && !strings.ContainsAny(p, "*>") {
			return p
		}
	}
	return ""
}

// ServerConfig is the part of a NATS server configuration file that makes
// the server trust this authority: the operator, the system account and
// both accounts preloaded into a memory resolver. `modelplane nats init`
// writes it for production servers to include; it holds no private key.
func (a *Authority) ServerConfig() string {
	var b strings.Builder
	b.WriteString("# modelplane NATS trust, written by `modelplane nats init`: include it in the server\n")
	b.WriteString("# configuration (include \"modelplane-trust.conf\"). It holds public JWTs only.\n")
	fmt.Fprintf(&b, "operator: %q\n", a.operatorJWT)
	fmt.Fprintf(&b, "system_account: %q\n", a.SystemAccountPublicKey())
	b.WriteString("resolver: MEMORY\nresolver_preload: {\n")
	fmt.Fprintf(&b, "  %s: %q\n", a.SystemAccountPublicKey(), a.systemJWT)
	fmt.Fprintf(&b, "  %s: %q\n", a.AccountPublicKey(), a.AccountJWT())
	b.WriteString("}\n")
	return b.String()
}

// SystemUser mints a user of the system account: what pushes an updated
// account JWT (revocations) to the servers. Only the control plane holds
// one.
func (a *Authority) SystemUser() (Credential, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, err
	}
	pub, _ := kp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "control-plane-system"
	token, err := uc.Encode(a.system)
	if err != nil {
		return Credential{}, fmt.Errorf("system user jwt: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, err
	}
	return Credential{jwt: token, seed: seed}, nil
}

// Revoke lists the user with public key userPub as revoked (every JWT of
// that key issued until now: each credential has a key of its own, so
// that is all of them) and re-signs the account JWT; Push then makes the servers refuse the user and
// close its connections. The revocation lives in this Authority only: the
// caller keeps its record (the control plane's node table) and revokes
// again after a restart, before it pushes.
func (a *Authority) Revoke(userPub string) error {
	if !nkeys.IsValidPublicUserKey(userPub) {
		return fmt.Errorf("revoke: %q is not a user public key", userPub)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accountClaims.Revoke(userPub)
	token, err := a.accountClaims.Encode(a.operator)
	if err != nil {
		return fmt.Errorf("revoke: account jwt: %w", err)
	}
	a.accountJWT = token
	return nil
}

// ErrAccountNotLoaded is Push's answer from a server that has not loaded
// the account yet (no connection of it since the server started): the
// server skips the update, and the first connection of the account loads
// the JWT from the server's trust file instead, revocations and all
// forgotten. The push must be sent again once the account is loaded.
var ErrAccountNotLoaded = errors.New("the NATS server has not loaded the account; the update was skipped")

// Push sends the account JWT, as last signed, to the servers nc (a
// SystemUser connection) reaches, and waits for the answer of one.
func (a *Authority) Push(ctx context.Context, nc *nats.Conn) error {
	subject := "$SYS.REQ.ACCOUNT." + a.AccountPublicKey() + ".CLAIMS.UPDATE"
	resp, err := nc.RequestWithContext(ctx, subject, []byte(a.AccountJWT()))
	if err != nil {
		return fmt.Errorf("push account jwt: %w", err)
	}
	var r struct {
		Data *struct {
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("push account jwt: answer %q: %w", resp.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("push account jwt: %s", r.Error.Description)
	}
	// nats-server answers a skipped update with code 200 and this message.
	if r.Data != nil && strings.Contains(r.Data.Message, "skipped") {
		return fmt.Errorf("push account jwt: %w", ErrAccountNotLoaded)
	}
	return nil
}
