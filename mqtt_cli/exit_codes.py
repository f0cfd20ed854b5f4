"""The exit codes of the `mqtt` command, defined once; docs/exit-codes.md says when each is used.

A code's meaning depends on the command where noted (3 is "cannot connect" for a client, "not a capture" for
`dump` and `analyze`): the names say which.
"""

EXIT_OK = 0
EXIT_FAILURE = 1  # a failure at run time; also an unexpected exception (after its traceback)
EXIT_OUTPUT_FAILED = 1  # sub, rr, -d: the output cannot be written (full disk, file-size limit), as cat and tee
EXIT_USAGE = 2  # bad usage, found before anything is done
EXIT_CONNECT_FAILED = 3  # clients: no connection (DNS, refused, unreachable, no CONNACK in time)
EXIT_NOT_A_CAPTURE = 3  # dump, analyze: the input is not a capture
EXIT_TLS_FAILED = 4  # clients: the TLS handshake failed
EXIT_MISSING_DEPENDENCY = 4  # analyze: pyspark, pandas, pyarrow or Java is missing
EXIT_BROKER_REFUSED = 5  # clients, bridge: CONNACK with a failure code
EXIT_SUBSCRIBE_REFUSED = 6  # sub, rr: SUBACK with a failure code
EXIT_PUBLISH_FAILED = 7  # pub, rr: a message refused or not acknowledged
EXIT_CONNECTION_LOST = 8  # clients: the connection ended before the work was done
EXIT_EXPECT_NOT_MET = 9  # bench: an --expect condition failed
EXIT_TIMEOUT = 27  # sub -W, rr -W: as mosquitto_sub
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15, as a shell reports a command killed by it
