package main

// sluice credits add|set tops up a subject's credits balance under a rule,
// through a server or straight in its Redis, as sluice subject reset does.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/check"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func init() {
	rootCmd.AddCommand(newCreditsCmd())
}

func newCreditsCmd() *cobra.Command {
	var database string
	cmd := groupCmd("credits", "Top up a subject's credits balance (add, set)")
	addDatabaseFlag(cmd, &database)
	for _, mode := range []string{"add", "set"} {
		var redisURL, redisPrefix, limit, key string
		short := "Add credits to a subject's balance under a rule"
		if mode == "set" {
			short = "Set a subject's credits balance under a rule"
		}
		sub := &cobra.Command{
			Use:   mode + " <tenant> <rule> <subject> <amount>",
			Short: short,
			Long: short + `, once per --idempotency-key (kept 24 hours):
repeating the command with the same key changes nothing, so a retry after a
timeout is safe. Without --idempotency-key a fresh one is made and printed.

With --server (and --token) the server does it. Without, the balance is
changed in the Redis of --redis (with the servers' --redis-prefix) and the
top-up recorded in the audit log of the catalog database of --database.`,
			Example: `  sluice credits ` + mode + ` acme api customer-42 5000 --limit credits --idempotency-key invoice-0042 --server http://localhost:8080 --token "$TOKEN"`,
			Args:    exactArgs(4),
			RunE: func(cmd *cobra.Command, args []string) error {
				tenant, rule, subject := args[0], args[1], args[2]
				amount, err := strconv.ParseInt(args[3], 10, 64)
				if err != nil {
					return fmt.Errorf("amount %q is not a whole number of credits", args[3])
				}
				if key == "" {
					var b [12]byte
					rand.Read(b[:])
					key = "cli-" + hex.EncodeToString(b[:])
				}
				q := check.CreditsTopUp{Tenant: tenant, Rule: rule, Subject: subject, Limit: limit, IdempotencyKey: key}
				in := adminapi.TopUp{Limit: limit, IdempotencyKey: key}
				if mode == "add" {
					q.Add, in.Add = amount, &amount
				} else {
					q.Set, q.SetBalance, in.Set = amount, true, &amount
				}
				var res sluice.TopUpResult
				if remote.server != "" {
					if cmd.Flags().Changed("redis") {
						return errors.New("--server and --redis both given; the server tops up in its own store, so give only --server")
					}
					a, err := remoteAdmin(cmd)
					if err != nil {
						return err
					}
					out, err := a.TopUpCredits(cmd.Context(), tenant, rule, subject, in)
					if err != nil {
						return unreachable(err)
					}
					res = sluice.TopUpResult{Balance: out.Balance, Applied: out.Applied}
				} else {
					if redisURL == "" {
						return errors.New("credits " + mode + " needs --server and --token (or SLUICE_SERVER and SLUICE_TOKEN), or --redis with --database: balances live in the servers' store, not in the catalog database")
					}
					err := withDatabase(cmd.Context(), database, readOnly, func(c sluice.Catalog) error {
						var err error
						res, err = topUpInStore(cmd.Context(), c, redisURL, redisPrefix, q)
						return err
					})
					if err != nil {
						return err
					}
				}
				if res.Applied {
					fmt.Fprintf(cmd.OutOrStdout(), "Balance of %s under %s/%s (limit %s): %d (idempotency key %s).\n", subject, tenant, rule, limit, res.Balance, key)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "Idempotency key %s was used already: nothing changed. Balance: %d.\n", key, res.Balance)
				}
				return nil
			},
		}
		sub.Flags().StringVar(&limit, "limit", "credits", "the rule's credits limit")
		sub.Flags().StringVar(&key, "idempotency-key", "", "names the top-up, so a repeat is applied once (default: a fresh one)")
		sub.Flags().StringVar(&redisURL, "redis", "", "without --server: the servers' Redis (redis://, redis-cluster://, redis-sentinel://)")
		sub.Flags().StringVar(&redisPrefix, "redis-prefix", "sluice:", "without --server: the servers' --redis-prefix")
		cmd.AddCommand(sub)
	}
	return cmd
}

// topUpInStore does what the admin API's top-up does (check.TopUpCredits),
// from outside a server, on the servers' Redis.
func topUpInStore(ctx context.Context, c sluice.Catalog, redisURL, prefix string, q check.CreditsTopUp) (sluice.TopUpResult, error) {
	store, err := sluiceredis.Open(redisURL, sluiceredis.Options{Prefix: prefix})
	if err != nil {
		return sluice.TopUpResult{}, fmt.Errorf("open Redis: %w", err)
	}
	defer store.Close()
	engine := check.New(store, check.Options{})
	defer engine.Close()
	return engine.TopUpCredits(ctx, c, q)
}
