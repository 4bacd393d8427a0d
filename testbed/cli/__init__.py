"""The `testbed` command (:mod:`.main`) and what only it uses: its output
(:mod:`.output`, :mod:`.progress`), the bodies of its longer commands (:mod:`.budget`,
:mod:`.experiments`), the Mininet CLI (:mod:`.mncli`), and the machine's setup commands
(:mod:`.doctor`, :mod:`.image`, :mod:`.provision`). :mod:`.quick_exit` leaves without the
interpreter's teardown.

The top layer: it may import every package; none imports it.
"""
