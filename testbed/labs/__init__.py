"""Classroom labs: lab sheets in ``labs/``, and the commands that start and grade them
(``testbed lab list | show | start | check``)."""
