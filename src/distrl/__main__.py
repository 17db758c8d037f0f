from distrl.cli import run

run()
