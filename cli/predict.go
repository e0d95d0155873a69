package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"modelplane/buildinfo"
)

func (a *app) predictCmd() *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "predict ENDPOINT -d BODY|@FILE|@-",
		Short: "Call an endpoint through the gateway and print its answer",
		Long: `predict POSTs a /predict body to the endpoint through the inference gateway
(--gateway, MP_GATEWAY or the context's gateway) with the API key, and
prints the answer. An instance is an object keyed by feature name or a
row of the feature values in the model's feature_names order:

  {"instances": [{"amount": 42.5, "country": "US"}]}
  {"instances": [[42.5, "US"]]}`,
		Example: `  modelplane predict fraud-scoring -d @payments.json`,
		Args:    args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if data == "" {
				return usagef("predict: -d BODY, -d @FILE or -d @- is required")
			}
			body, err := readArg(data, a.env.Stdin)
			if err != nil {
				return err
			}
			resp, err := a.gatewayPost(cmd, argv[0], "/predict", body)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if a.output == "table" {
				_, err = fmt.Fprintln(a.env.Stdout, strings.TrimSpace(string(b)))
				return err
			}
			return a.printOne(b, nil)
		},
	}
	cmd.Flags().StringVarP(&data, "data", "d", "", "the request body: JSON, @file or @- for stdin")
	return cmd
}

// gatewayPost POSTs body to the endpoint's path through the inference
// gateway with the API key; an answer of 300 or more is returned as its
// problem.
func (a *app) gatewayPost(cmd *cobra.Command, endpoint, path string, body []byte) (*http.Response, error) {
	c, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if c.t.gateway == "" {
		return nil, usagef("no gateway: set MP_GATEWAY (source .modelplane/dev.env), pass --gateway, or set the context's")
	}
	u := strings.TrimRight(c.t.gateway, "/") + "/v1/endpoints/" + esc(endpoint) + path
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.t.key)
	req.Header.Set(buildinfo.Header, c.version)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readProblem(resp)
	}
	return resp, nil
}
