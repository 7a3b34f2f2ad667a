package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// screenshotsEnv names a folder to write the screenshots to instead of a
// fresh temporary one (removed after a pass, kept after a failure):
// docs/console.md shows the PNGs this test takes, and
//
//	SLUICE_CONSOLE_SCREENSHOTS=$PWD/docs/console go test -run TestBrowser ./console/
//
// takes them again.
const screenshotsEnv = "SLUICE_CONSOLE_SCREENSHOTS"

// browserTimeout bounds the whole browser session: generous, since a loaded
// CI machine starts Chromium slowly; no step waits longer than it needs.
const browserTimeout = 3 * time.Minute

// TestBrowser drives the console in headless Chromium as an operator does:
// sign in, create a tenant, a key (its secret shown once) and a rule, send
// checks through /v1/check until they are denied and watch the overview and
// the top denied subjects update, reset the subject, sign out and be
// refused. It runs at 1280 and 390 pixels wide.
func TestBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	s := newStack(t)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		var err error
		if shots, err = os.MkdirTemp("", "sluice-console-screenshots-"); err != nil {
			t.Fatal(err)
		}
		// Kept when the test fails, to see what the browser saw.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("screenshots kept in %s", shots)
				return
			}
			_ = os.RemoveAll(shots)
		})
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()

	base := s.srv.URL + "/console/"
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// waitText polls the text of sel until it contains want.
	waitText := func(what, sel, want string) {
		t.Helper()
		deadline := time.Now().Add(browserTimeout / 2)
		var text string
		for {
			text, _ = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel)))
			if strings.Contains(text, want) {
				return
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				t.Fatalf("%s: %s never showed %q; last %q", what, sel, want, text)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Every page records what the Content-Security-Policy blocks; the test
	// ends by asserting that nothing was (an inline style or script would be).
	run("watch the CSP", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: cspWatcher})
		return err
	}))

	// Sign in: the field has the focus.
	run("sign-in page", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#secret")))
	shot("signin")
	if focused := eval[string](t, ctx, "focus", `document.activeElement.id`); focused != "secret" {
		t.Errorf("the sign-in page focuses %q, want the secret's field", focused)
	}
	run("sign in", chromedp.SendKeys(chromedp.CSS("#secret"), adminToken), chromedp.Submit(chromedp.CSS("#secret")),
		chromedp.WaitVisible(chromedp.CSS(`form.signout`)))
	waitText("overview before traffic", "#live", "No checks yet")
	run("tab", chromedp.KeyEvent("\t"))
	if focused := eval[string](t, ctx, "focus", `document.activeElement.className`); focused != "skip" {
		t.Errorf("the first Tab on a page focuses %q, want the skip link", focused)
	}
	if url := eval[string](t, ctx, "location", `window.location.href`); strings.Contains(url, adminToken) {
		t.Fatalf("the token is in the URL %s", url)
	}

	// A tenant, a key (secret shown once, with a copy button) and a rule.
	run("tenants", chromedp.Navigate(base+"tenants"), chromedp.WaitVisible(chromedp.CSS("#tenant-name")),
		chromedp.SendKeys(chromedp.CSS("#tenant-name"), "acme"), chromedp.Submit(chromedp.CSS("#tenant-name")))
	waitText("tenant created", "#tenants", "acme")
	shot("tenants")
	run("create key", chromedp.Navigate(base+"tenants/acme/keys"), chromedp.WaitVisible(chromedp.CSS("#key-name")),
		chromedp.SendKeys(chromedp.CSS("#key-name"), "web"), chromedp.SetValue(chromedp.CSS("#key-role"), "check"),
		chromedp.Submit(chromedp.CSS("#key-name")), chromedp.WaitVisible(chromedp.CSS("#new-secret")),
		chromedp.Click(chromedp.CSS("#copy-secret")))
	secret := eval[string](t, ctx, "secret", `document.getElementById("new-secret").value`)
	if !strings.HasPrefix(secret, "sk_") {
		t.Fatalf("secret %q", secret)
	}
	waitText("copy", "#copy-status", ".") // copied, or how to copy by hand
	shot("key-created")
	run("keys again", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#keys")))
	if eval[bool](t, ctx, "secret again", `document.body.innerHTML.includes(`+jsString(secret)+`)`) {
		t.Fatal("the key's secret is shown a second time")
	}

	run("new rule", chromedp.Navigate(base+"tenants/acme/rules/new"), chromedp.WaitVisible(chromedp.CSS("#rule-name")),
		chromedp.SendKeys(chromedp.CSS("#rule-name"), "orders"), chromedp.SendKeys(chromedp.CSS("#rule-route"), "orders"),
		chromedp.SetValue(chromedp.CSS("#algorithm0"), "fixed_window"), chromedp.SendKeys(chromedp.CSS("#limit_name0"), "hour"),
		chromedp.SendKeys(chromedp.CSS("#amount0"), "3"), chromedp.SendKeys(chromedp.CSS("#window0"), "1h"),
		chromedp.Submit(chromedp.CSS("#rule-name")), chromedp.WaitVisible(chromedp.CSS("#err-route")))
	shot("rule-error")
	run("fix the route", chromedp.SetValue(chromedp.CSS("#rule-route"), "/orders*"), chromedp.Submit(chromedp.CSS("#rule-name")),
		chromedp.WaitVisible(chromedp.CSS("#rules")))
	waitText("rule listed", "#rules", "/orders*")
	shot("rules")

	// An override of the rule, created and deleted on its page; it is gone
	// before the traffic below, which counts the rule's own limit.
	run("new override", chromedp.Navigate(base+"tenants/acme/rules/orders/overrides"), chromedp.WaitVisible(chromedp.CSS("#override-name")),
		chromedp.SendKeys(chromedp.CSS("#override-name"), "big-customer"), chromedp.SendKeys(chromedp.CSS("#override-subjects"), "cust-1, vip-*"),
		chromedp.SendKeys(chromedp.CSS("#override-expires"), "2099-01-01T00:00"),
		chromedp.SetValue(chromedp.CSS("#algorithm0"), "fixed_window"), chromedp.SendKeys(chromedp.CSS("#limit_name0"), "hours"),
		chromedp.SendKeys(chromedp.CSS("#amount0"), "300"), chromedp.SendKeys(chromedp.CSS("#window0"), "1h"),
		chromedp.Click(chromedp.CSS("#save-override")), chromedp.WaitVisible(chromedp.CSS("#err-limit0")))
	waitText("misspelt limit refused", "#err-limit0", "has no limit named")
	shot("override-error")
	run("fix the limit name", chromedp.SetValue(chromedp.CSS("#limit_name0"), "hour"), chromedp.Click(chromedp.CSS("#save-override")),
		chromedp.WaitVisible(chromedp.CSS("#overrides")))
	waitText("override listed", "#overrides", "vip-*")
	waitText("override expiry in UTC", "#overrides", "2099-01-01T00:00:00Z")
	shot("overrides")
	run("delete override", chromedp.Click(chromedp.CSS(`#overrides a.danger`)), chromedp.WaitVisible(chromedp.CSS("#confirm-button")),
		chromedp.Click(chromedp.CSS("#confirm-button")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	waitText("override deleted", "main", "No overrides")

	// Traffic: the overview, open before it, updates by itself.
	run("overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#live")))
	denied := 0
	for i := 0; denied < 2; i++ {
		if i == 10 {
			t.Fatalf("no denial after %d checks of a limit of 3", i)
		}
		status := postCheck(t, s.srv.URL, secret, "user-42")
		if status == http.StatusTooManyRequests {
			denied++
		}
	}
	postCheck(t, s.srv.URL, secret, "user-7")
	waitText("live rates", "#rule-rates", "acme/orders")
	waitText("top denied", "table.top-denied", "user-42")
	rates := eval[string](t, ctx, "rates", `document.querySelector("#rule-rates tbody").innerText`)
	if !strings.Contains(rates, "4\t2\t0\t0") {
		t.Errorf("rule row %q, want 4 allowed (3 of user-42, 1 of user-7), 2 denied", rates)
	}
	run("chart", chromedp.WaitVisible(chromedp.CSS("#chart canvas")))
	run("chart data", chromedp.WaitVisible(chromedp.CSS(`#chart[data-denied="2"][data-allowed="4"]`)))
	shot("overview")

	// The inspector: nothing left, then reset.
	run("inspect", chromedp.Navigate(base+"tenants/acme/inspect?rule=orders&subject=user-42"),
		chromedp.WaitVisible(chromedp.CSS("#inspect-result")))
	waitText("remaining 0", "#inspect-result tbody", "3\t0")
	run("reset", chromedp.Click(chromedp.CSS("#reset-subject")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	waitText("remaining 3", "#inspect-result tbody", "3\t3")
	shot("inspector")
	if status := postCheck(t, s.srv.URL, secret, "user-42"); status != http.StatusOK {
		t.Errorf("check after the reset: %d, want 200", status)
	}

	// Usage history, once the instance has flushed: 5 allowed (4 of
	// user-42, 1 of user-7), 2 denied, user-42 the top denied subject,
	// linked to the inspector.
	s.flushUsage()
	run("usage", chromedp.Navigate(base+"tenants/acme/usage"), chromedp.WaitVisible(chromedp.CSS("#usage-totals")))
	waitText("usage totals", "#usage-totals tbody", "orders\t5\t2\t0\t0\t0\t5")
	waitText("top denied subjects", "#usage-top-denied tbody", "user-42\torders\t2\t4")
	run("usage chart", chromedp.WaitVisible(chromedp.CSS(`#usage-chart[data-denied="2"][data-allowed="5"] canvas`)))
	shot("usage")
	if link := eval[string](t, ctx, "inspector link", `document.querySelector("#usage-top-denied a").getAttribute("href")`); link != "/console/tenants/acme/inspect?rule=orders&subject=user-42" {
		t.Errorf("the top subject links to %q", link)
	}
	run("usage filtered", chromedp.Navigate(base+"tenants/acme/usage?range=1h&subject=nobody"), chromedp.WaitVisible(chromedp.CSS("#usage-chart")))
	waitText("nothing matches", "main", "No subject containing “nobody”.")

	// Every page at 1280 and 390 pixels wide: nothing wider than the
	// screen, and every action either on screen or in a table that scrolls.
	run("keys for the revoke link", chromedp.Navigate(base+"tenants/acme/keys"), chromedp.WaitVisible(chromedp.CSS("#keys")))
	keyPath := eval[string](t, ctx, "revoke link", `document.querySelector('a[href$="/revoke"]').getAttribute("href")`)
	pages := []struct{ name, path, sel string }{
		{"overview", "", "#live"},
		{"tenants", "tenants", "#tenants"},
		{"keys", "tenants/acme/keys", "#keys"},
		{"rules", "tenants/acme/rules", "#rules"},
		{"rule-form", "tenants/acme/rules/orders/edit", "#rule-route"},
		{"inspect", "tenants/acme/inspect?rule=orders&subject=user-42", "#inspect-result"},
		{"envoy", "envoy", "main"},
		{"audit", "audit", "#audit"},
		{"usage", "tenants/acme/usage?range=30d", "#usage-totals"},
		{"confirm-delete-tenant", "tenants/acme/delete", "#confirm"},
		{"confirm-revoke-key", strings.TrimPrefix(keyPath, "/console/"), "#confirm-button"},
		{"confirm-delete-rule", "tenants/acme/rules/orders/delete", "#confirm-button"},
		{"overrides", "tenants/acme/rules/orders/overrides", "#override-form"},
	}
	for _, width := range []int64{1280, 390} {
		run(fmt.Sprint("width ", width), chromedp.EmulateViewport(width, 844))
		for _, pg := range pages {
			run(pg.name, chromedp.Navigate(base+pg.path), chromedp.WaitVisible(chromedp.CSS(pg.sel)))
			checkFits(t, ctx, fmt.Sprintf("%s at %d px", pg.name, width))
			if width == 390 && (pg.name == "keys" || pg.name == "rules" || pg.name == "overview" || pg.name == "rule-form" || pg.name == "usage") {
				shot(pg.name + "-390")
			}
		}
	}
	run("wide again", chromedp.EmulateViewport(1280, 900))

	if blocked := eval[string](t, ctx, "CSP violations", `sessionStorage.getItem("csp") || "[]"`); blocked != "[]" {
		t.Errorf("the Content-Security-Policy blocked %s", blocked)
	}

	// Sign out, then be refused.
	run("sign out", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("form.signout button")),
		chromedp.Click(chromedp.CSS("form.signout button")), chromedp.WaitVisible(chromedp.CSS("#secret")))
	waitText("signed out", "main", "You are signed out.")
	for _, width := range []int64{390, 1280} {
		run(fmt.Sprint("sign-in at ", width), chromedp.EmulateViewport(width, 844), chromedp.Navigate(base+"signin"),
			chromedp.WaitVisible(chromedp.CSS("#secret")))
		checkFits(t, ctx, fmt.Sprintf("sign-in at %d px", width))
	}
	run("after sign-out", chromedp.Navigate(base+"tenants/acme/keys"), chromedp.WaitVisible(chromedp.CSS("#secret")))
	if eval[bool](t, ctx, "no session", `!!document.querySelector("form.signout")`) {
		t.Error("a page after sign-out shows a signed-in console")
	}
}

// fitsScript reports, of the page shown, what does not fit the viewport:
// the page scrolling sideways, or an action (button, button-styled link)
// outside the viewport and not inside a container that scrolls sideways.
const fitsScript = `(function () {
	var out = [];
	var se = document.scrollingElement;
	if (se.scrollWidth > window.innerWidth) out.push("the page is " + se.scrollWidth + " px wide in a " + window.innerWidth + " px viewport");
	document.querySelectorAll("button, a.button, a.danger, input[type=submit]").forEach(function (el) {
		var r = el.getBoundingClientRect();
		if (r.width === 0) return;
		if (r.left >= 0 && r.right <= window.innerWidth + 0.5) return;
		for (var p = el.parentElement; p; p = p.parentElement) {
			var ox = getComputedStyle(p).overflowX;
			if ((ox === "auto" || ox === "scroll") && p.scrollWidth > p.clientWidth) return;
		}
		out.push((el.innerText || el.value).trim() + " at x " + Math.round(r.left) + "-" + Math.round(r.right));
	});
	return out.join("; ");
})()`

// checkFits fails the test for what does not fit the page shown.
func checkFits(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if bad := eval[string](t, ctx, what, fitsScript); bad != "" {
		t.Errorf("%s: %s", what, bad)
	}
}

// eval evaluates a JavaScript expression in the page; what names it in a
// failure.
func eval[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// cspWatcher keeps, in the tab's session storage, every violation of the
// Content-Security-Policy (a script added by the test, so not subject to it).
const cspWatcher = `document.addEventListener("securitypolicyviolation", function (e) {
	var v = JSON.parse(sessionStorage.getItem("csp") || "[]");
	v.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile + ":" + e.lineNumber);
	sessionStorage.setItem("csp", JSON.stringify(v));
});`

func postCheck(t *testing.T, base, key, subject string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", strings.NewReader(`{"route":"/orders/1","subject":"`+subject+`"}`))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
