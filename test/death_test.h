// Death tests without fork(): the test binary runs one of its own hidden
// test cases ("[.]" tag) in a fresh process and reports how that process
// ended and what it wrote to stderr. A fresh process (not a fork of one
// with Nexus threads) works under every sanitizer.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace rpc::test {

struct ChildEnd {
  int status = -1;  // exit code, or 128 + signal
  std::string stderr_text;
  // Died instead of finishing: abort() shows as SIGABRT, or as exit status
  // 1 when Catch2's signal handler reports it, or as TSan's exit code 66
  // when TSan reports on the way down. The message says which death it was.
  bool aborted() const { return status != 0 && status != -1; }
};

// Runs this test program with only the test case `name` (hidden or not).
inline ChildEnd run_test_case_in_child(const std::string& name) {
  ChildEnd end;
  int err_pipe[2];
  if (::pipe(err_pipe) != 0) return end;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::string self = "/proc/self/exe";
  std::string arg = name;
  std::vector<char*> argv{self.data(), arg.data(), nullptr};
  // libinfinipath (pulled in by Debian's libfabric) would otherwise catch
  // the abort and drop a <exe>.btr backtrace file in the working directory.
  std::vector<std::string> env_strings{"IPATH_NO_BACKTRACE=1", "HFI_NO_BACKTRACE=1"};
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  for (char** e = environ; *e != nullptr; e++) env.push_back(*e);
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    return end;
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(err_pipe[0], buf, sizeof(buf));
    if (n <= 0) break;
    end.stderr_text.append(buf, static_cast<size_t>(n));
  }
  ::close(err_pipe[0]);
  int status = 0;
  if (::waitpid(pid, &status, 0) == pid) {
    end.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return end;
}

}  // namespace rpc::test
