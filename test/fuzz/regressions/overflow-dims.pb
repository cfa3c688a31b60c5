
dtc.program/1*
w
€€€€€€€