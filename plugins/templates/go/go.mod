module example.com/{{name}}

go 1.25

require kstage.dev/plugin v0.0.0

replace kstage.dev/plugin => ./sdk/go
