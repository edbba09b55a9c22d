"""What every part of the project uses, beneath the loop, the workloads and the search: progress lines
(`progress`), the errors a run or a search ends with and their exit codes (`errors`, `exit_codes`), atomic
file writes (`files`) and the command lines' one-line parser (`cli`)."""
