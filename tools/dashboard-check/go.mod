module kubetape.local/tools/dashboard-check

go 1.21

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
