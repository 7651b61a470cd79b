package pyroscope_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/stacks"
)

// server stands in for Pyroscope and prints the labels it receives.
type server struct {
	pushv1connect.UnimplementedPusherServiceHandler
}

func (server) Push(_ context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	for _, s := range req.Msg.Series {
		for _, l := range s.Labels {
			fmt.Printf("%s=%s ", l.Name, l.Value)
		}
		fmt.Println(len(s.Samples), "profile(s)")
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

func Example() {
	_, handler := pushv1connect.NewPusherServiceHandler(server{})
	srv := httptest.NewServer(handler)
	defer srv.Close()

	client, err := pyroscope.New(pyroscope.Config{URL: srv.URL, Host: "web-1", Labels: map[string]string{"env": "prod"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, File: "/usr/bin/nginx"}
	loc := &stacks.Location{Mapping: exe, Address: 0x1100, Frames: []stacks.Frame{{Function: "ngx_worker"}}}
	p := &stacks.Profile{Start: time.Now(), Duration: 15 * time.Second, Period: time.Second / 19,
		Samples: []*stacks.Sample{{Stack: []*stacks.Location{loc}, Count: 7, Pid: 80, Tid: 80, Comm: "nginx"}}}
	if err := client.Push(context.Background(), p); err != nil {
		fmt.Println(err)
	}
	// Output: __name__=process_cpu env=prod host=web-1 service_name=nginx 1 profile(s)
}
