module kstage.dev/plugin

go 1.25
