module shoal.dev/functions

go 1.22
